"""`chexretrieve eval density`: the density report folder (OOD, long tail, decomposition).

Writes ``OUT/report.md`` (tables, the seed's claims with the numbers that decide them),
``OUT/tables/*.csv`` and ``OUT/manifest.json`` (settings, timings, the command line).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import typer

from chexretrieve.evaluation.cli_options import command_line


def density_command(
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Report folder (default eval/reports/density-phantom-DATE)."
    ),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec."),
    phantom_seed: int = typer.Option(
        2, "--phantom-seed", help="Phantom world (not the encoder's training world)."
    ),
    n_archive: int = typer.Option(1500, "--n-archive", help="Phantoms the density is fitted on."),
    n_heldout: int = typer.Option(400, "--n-heldout", help="Held-out phantoms (in distribution)."),
    n_transforms: int = typer.Option(80, "--n-transforms", help="Phantom renders that are OOD."),
    n_synthetic: int = typer.Option(60, "--n-synthetic", help="Noise / texture images."),
    candidates: str = typer.Option("1,2,4,8,16,32,64", "--candidates", help="Mixture sizes K."),
    rare_max: int = typer.Option(
        2, "--rare-max", help="A combination is rare when at most this many archive images have it."
    ),
    seed: int = typer.Option(0, "--seed", help="EM and split seed."),
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """OOD AUROC/FPR95 (MovMF vs Gaussian vs k-NN), long tail, decomposition purity."""
    options = dict(locals())  # the manifest's provenance records them (staleness check)
    from rich.console import Console

    from chexretrieve.encoders import load_encoder
    from chexretrieve.evaluation.cli_options import int_items
    from chexretrieve.evaluation.density_data import CACHED_MESSAGE, density_sets
    from chexretrieve.evaluation.density_eval import (
        component_names_table,
        decomposition_table,
        finding_anchor_texts,
        fit_models,
        long_tail_table,
        ood_tables,
        per_file_table,
    )
    from chexretrieve.evaluation.phantom_source import check_disjoint_world

    console = Console(stderr=True, quiet=quiet)
    started = time.perf_counter()
    try:
        model = load_encoder(encoder)
        check_disjoint_world(model, phantom_seed)
        heard: list[str] = []

        def progress(what: str) -> None:
            heard.append(what)
            console.print(f"[dim]{what}[/dim]", markup=True)

        sets = density_sets(
            model, phantom_seed, n_archive, n_heldout, n_transforms, n_synthetic,
            progress=progress,
        )  # fmt: skip
        cached = any(h.startswith(CACHED_MESSAGE) for h in heard)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print("[dim]fitting MovMF, Gaussian, k-NN on the archive[/dim]")
    models = fit_models(sets.archive, int_items(candidates, "--candidates"), seed)
    ood, flags, by_kind = ood_tables(sets, models)
    files = per_file_table(sets, models)
    tail = long_tail_table(sets, models, rare_max)
    parts = decomposition_table(sets, models, seed)
    console.print("[dim]naming components by anchor sentences and true findings[/dim]")
    names = component_names_table(sets, models, finding_anchor_texts(model))
    selection = (
        __import__("pandas")
        .Series(models.selection.scores, name="held-out mean log-likelihood")
        .rename_axis("K")
        .to_frame()
    )
    out = out or Path("eval/reports") / f"density-phantom-{dt.date.today().isoformat()}"
    tables = {
        "ood_auroc_fpr95": ood.set_index(["model", "OOD group"]),
        "ood_flag_rates": flags,
        "ood_flag_rates_by_kind": by_kind,
        "pydicom_data_percentiles": files,
        "long_tail": tail,
        "decomposition": parts,
        "component_names": names,
        "component_count": selection,
    }
    settings = {
        "encoder": model.encoder_id,
        "phantom_seed": phantom_seed,
        "n_archive": n_archive,
        "n_heldout": n_heldout,
        "n_ood": int(len(sets.ood)),
        "candidates": candidates,
        "chosen_K": models.movmf.n_components,
        "rare_max": rare_max,
        "seed": seed,
        "fit_seconds": {k: round(v, 3) for k, v in models.fit_seconds.items()},
        "total_seconds": round(time.perf_counter() - started, 1),
        "embeddings_from_cache": cached,
    }
    from chexretrieve.evaluation.provenance import report_provenance

    provenance = report_provenance(
        "density", encoders=[(encoder, model.encoder_id)], worlds=[phantom_seed], options=options
    )
    write_density_report(out, command_line(), settings, tables, provenance)
    console.print(f"report: {out / 'report.md'}")


def _markdown(frame) -> str:
    """A pipe table: index columns first, floats to 3 decimals, NaN blank."""
    flat = frame.reset_index()

    def text(value) -> str:
        if isinstance(value, float):
            return "" if value != value else f"{value:.3f}"
        return str(value).replace("|", "/")

    header = [str(c) for c in flat.columns]
    rows = [[text(v) for v in row] for row in flat.itertuples(index=False)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_density_report(
    out: Path, command: str, settings: dict, tables: dict, provenance: dict | None = None
) -> None:
    from chexretrieve.evaluation.density_claims import claims_text

    out = Path(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(out / "tables" / f"{name}.csv")
    titles = {
        "ood_auroc_fpr95": "OOD detection: AUROC and FPR95 (held-out phantoms vs each OOD group)",
        "ood_flag_rates": "The deployed rule: share flagged below the archive's 0.5th percentile",
        "ood_flag_rates_by_kind": "The deployed rule per kind of phantom render / synthetic image",
        "pydicom_data_percentiles": "pydicom-data files: percentile among held-out phantoms",
        "long_tail": "Long tail: rare finding combinations vs the five most common",
        "decomposition": "Concept decomposition: sparsity and purity of the top component",
        "component_names": "The 16 heaviest components, named (true findings positive in >= 50 %"
        " of the component's archive images and >= 1.5 x the archive rate; nearest anchor "
        "sentence of all findings' sets, both centred)",
        "component_count": "Component count: held-out log-likelihood per K (archive split 80/20)",
    }
    lines = [
        "# Archive density on the phantom world: OOD, long tail, concepts",
        "",
        f"Command: `{command}`",
        "",
        f"Encoder `{settings['encoder']}`, phantom world {settings['phantom_seed']}: "
        f"{settings['n_archive']} archive phantoms (every model is fitted on these only), "
        f"{settings['n_heldout']} held-out phantoms (in distribution), {settings['n_ood']} "
        f"out-of-distribution images. MovMF K = {settings['chosen_K']} (held-out likelihood). "
        f"Run time {settings['total_seconds']} s ("
        + (
            "images and embeddings read from the cache"
            if settings.get("embeddings_from_cache")
            else "images generated and embedded in this run; later runs read them from the cache"
        )
        + ").",
        "",
        "SIMULATION: synthetic phantoms and a small phantom-trained image tower; these figures say "
        "nothing about clinical performance or about CLIP embeddings of real films.",
        "",
        "## The seed's claims, checked here",
        "",
        claims_text(tables),
        "",
    ]
    for name, frame in tables.items():
        lines += [f"## {titles[name]}", "", _markdown(frame), ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    manifest = {"command": command, "settings": settings, "tables": sorted(tables)}
    if provenance:
        manifest["provenance"] = provenance  # provenance.py's common block
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
