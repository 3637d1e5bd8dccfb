"""`chexretrieve density fit|show|rare`: the archive density from the command line.

In the application layer because it opens the store, the encoder and the anchor sets through the
composition root, like ``search``. ``fit`` fits now (and replaces the saved fit of the store's
current generation); ``show`` says which fit a search would use and whether it is current; ``rare``
lists the archive's rarest images (lowest log-density first) for teaching-file lookup.
"""

from __future__ import annotations

import typer

from chexretrieve import strict_json

density_app = typer.Typer(
    help="The archive's own density: OOD flag, rare cases, concept decomposition.",
    no_args_is_help=True,
    add_completion=False,
)

_DB_HELP = (
    "Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite if it exists, "
    "else the demo store data/demo/chexretrieve.sqlite; none is ever created)."
)


def _open(db, encoder):  # noqa: ANN001, ANN202
    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.density.config import FIT_NOW, DensityConfig

    density = DensityConfig(background_fit_above=FIT_NOW)  # a one-shot command fits now
    app = open_search_app(AppConfig(db_url=db, encoder=encoder, density=density))
    return app.service, app.service.density


def _fail(message: str) -> typer.Exit:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(2)


def _summary(density, stale: bool, note: str) -> dict:
    return {
        "encoder_id": density.encoder_id,
        "revision": density.revision,
        "fitted_at": density.fitted_at,
        "n_images": density.n_images,
        "n_components": density.model.n_components,
        "criterion": density.criterion,
        "criterion_scores": density.criterion_scores,
        "threshold": density.threshold,
        "ood_percentile": density.ood_percentile,
        "stale": stale,
        "note": note,
        "components": [c.as_dict() for c in density.components],
    }


@density_app.command("fit")
def fit_command(
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Fit the archive density of ENCODER now and save it with the store's generation."""
    import time

    try:
        service, provider = _open(db, encoder)
        started = time.perf_counter()
        density = provider.fit(service.gallery)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    summary = _summary(density, False, "")
    summary["fit_seconds"] = round(time.perf_counter() - started, 2)
    _print(summary, as_json)


@density_app.command("show")
def show_command(
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Which density a search would use now, whether it is current, and its components."""
    from dataclasses import replace

    try:
        service, provider = _open(db, encoder)
        provider.config = replace(provider.config, fit_on_search=False)  # show never fits
        density, stale, note = provider.usable(service.gallery)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if density is None:
        raise _fail(note)
    _print(_summary(density, stale, note), as_json)


@density_app.command("rare")
def rare_command(
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    top: int = typer.Option(20, "--top", "-n", help="Images to list."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Rare cases first: the archive images with the lowest log-density (teaching files)."""
    from chexretrieve.density.rarity import rare_cases

    if top < 1:
        raise _fail(f"--top must be at least 1, not {top}")
    try:
        service, provider = _open(db, encoder)
        rows, note = rare_cases(provider, service.gallery, top)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(strict_json.dumps({"note": note, "cases": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rarest archive images (lowest density first)")
    for column in ("rank", "case", "log p", "percentile", "view", "positive labels", "concept"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["rank"]),
            str(row["case"]),
            f"{row['log_density']:.2f}",
            f"{row['rarity_percentile']:.1f}",
            str(row["view_position"] or ""),
            ", ".join(row["positive_labels"]) or "none",
            row["concept"],
        )
    Console().print(table)
    if note:
        Console(stderr=True).print(note, markup=False)


def fit_after_ingest(store, encoder, console) -> None:  # noqa: ANN001
    """``ingest --fit-density``: fit the density of the store just written; a failure (too few
    images) is one line, never a failed ingest."""
    from rich.markup import escape

    from chexretrieve.density import ArchiveDensityProvider
    from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store

    try:
        anchors = StoreAnchorProvider(store, encoder)
        provider = ArchiveDensityProvider(store, encoder.encoder_id, anchors=anchors)
        density = provider.fit(gallery_from_store(store, encoder.encoder_id))
    except ValueError as exc:
        console.print(f"[yellow]density not fitted:[/yellow] {escape(str(exc))}")
        return
    console.print(
        f"density: {density.model.n_components} components on {density.n_images} images "
        f"(archive revision {density.revision})"
    )


def _print(summary: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(strict_json.dumps(summary, indent=2))
        return
    from rich.console import Console

    console = Console()
    console.print(
        f"density of {summary['encoder_id']}: {summary['n_components']} components on "
        f"{summary['n_images']} images (archive revision {summary['revision']}, "
        f"fitted {summary['fitted_at']}, K by {summary['criterion']}); OOD below log p = "
        f"{summary['threshold']:.2f} ({summary['ood_percentile']:g}th archive percentile)",
        markup=False,
    )
    if "fit_seconds" in summary:
        console.print(f"fitted in {summary['fit_seconds']} s", markup=False)
    if summary["note"]:
        console.print(f"note: {summary['note']}", markup=False)
    for c in summary["components"]:
        labels = ", ".join(c["labels"]) or "no dominant label"
        near = c["sentences"][0] if c["sentences"] else "-"
        console.print(
            f"  component {c['component']}: weight {c['weight']:.3f}; {labels}; nearest: {near}",
            markup=False,
        )
