"""`chexretrieve index`: build, update, inspect and verify the archive index of a store.

``build`` is what ``ingest`` runs at its end and what a curator's publication triggers in
``serve``; run it by hand after changing the index settings, for another encoder, or to index
more geometries ahead of their first use. It resumes where a killed build stopped and, on an
index that exists, only adds what the archive's changes need.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import typer

index_app = typer.Typer(
    help="The archive index searches read (built at ingest): build, status, verify.",
    no_args_is_help=True,
)


def progress_display(console, enabled: bool = True):  # noqa: ANN001, ANN201
    """(a context manager showing bars, progress(what, done, total)) for an index build."""
    if not enabled:
        return contextlib.nullcontext(), None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("index · {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )
    tasks: dict[str, int] = {}

    def progress(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = bar.add_task(what, total=max(total, 1))
        bar.update(tasks[what], completed=done, total=max(total, 1))

    return bar, progress


def build_index(
    store, encoder, config, findings=None, geometries=None, progress=None, anchors_dir=None
):  # noqa: ANN001, ANN201
    """Build or update ``store``'s index of ``encoder`` (chexretrieve.index.IndexBuilder); the
    committed manifest."""
    from chexretrieve.findings import FINDINGS
    from chexretrieve.index import IndexBuilder, index_folder
    from chexretrieve.search.sources import StoreAnchorProvider

    anchors = StoreAnchorProvider(store, encoder, anchors_dir)
    folder = index_folder(store, encoder.encoder_id, config.index)
    builder = IndexBuilder(folder, store, encoder.encoder_id, anchors, config.index,
                           config.search, config.density, progress)  # fmt: skip
    manifest = builder.build(findings or FINDINGS, geometries or None)
    build_index.timings = dict(builder.timings)  # what the last build spent per phase
    return manifest


def update_after_ingest(store, encoder, console, show_progress: bool = True) -> None:  # noqa: ANN001
    """The end of `ingest`: the archive index brought up to the store (appended rows only when
    it exists; built in full the first time). A failure is said, never fatal to the ingest."""
    from rich.markup import escape

    from chexretrieve.app.config import AppConfig

    started = time.perf_counter()
    display, progress = progress_display(console, show_progress)
    try:
        with display:
            manifest = build_index(store, encoder, AppConfig(), progress=progress)
    except (ValueError, OSError) as exc:
        console.print(
            f"[yellow]archive index not updated[/yellow]: {escape(str(exc))}; searches read the "
            "store meanwhile; run `chexretrieve index build` to retry",
            soft_wrap=True,
        )
        return
    console.print(
        f"archive index: {manifest.rows:,} images, {len(manifest.entries)} feature entries, "
        f"generation {manifest.generation} ({time.perf_counter() - started:.1f} s)",
        soft_wrap=True,
    )


@index_app.command("build")
def build_command(
    db: str | None = typer.Option(
        None, "--db", help="Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite)."
    ),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    findings: str | None = typer.Option(
        None, "--findings", help="Comma-separated findings to index (default: all 13)."
    ),
    geometries: str | None = typer.Option(
        None,
        "--geometries",
        help="Comma-separated geometries to index each finding under (default: the finding's "
        "default geometry plus IndexConfig.geometries).",
    ),
    folder: Path | None = typer.Option(
        None, "--index-dir", help="Index folder (default: beside a SQLite store)."
    ),
    feature_dtype: str = typer.Option(
        "float16", "--feature-dtype", help="Stored features: float16 or float32."
    ),
    density: bool = typer.Option(
        True, "--density/--no-density", help="Fit the archive density too."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Build or update the archive index (resumable; incremental on an existing index)."""
    from rich.console import Console
    from rich.markup import escape

    from chexretrieve.app.config import AppConfig
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.findings import canonical_finding
    from chexretrieve.geometry import geometry_name
    from chexretrieve.index import IndexConfig
    from chexretrieve.store import StoreConfig, default_db_url, open_store

    console = Console(stderr=True)
    try:
        wanted = [canonical_finding(f) for f in findings.split(",")] if findings else None
        shapes = [geometry_name(g).name for g in geometries.split(",")] if geometries else None
        config = AppConfig(db_url=db, encoder=encoder,
                           index=IndexConfig(folder=folder, feature_dtype=feature_dtype,
                                             density=density))  # fmt: skip
        store = open_store(config=StoreConfig(url=db or default_db_url(), create_if_missing=False))
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        model = load_encoder(encoder, device)
        started = time.perf_counter()
        display, callback = progress_display(console, progress)
        with display:
            manifest = build_index(store, model, config, wanted, shapes, callback)
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    finally:
        store.close()
    spent = getattr(build_index, "timings", {})
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in spent.items())
    console.print(
        f"index {manifest.folder}: generation {manifest.generation}, {manifest.rows:,} images "
        f"at archive revision {manifest.revision}, {len(manifest.entries)} feature entries, "
        f"built in {time.perf_counter() - started:.1f} s ({phases or 'nothing to do'})",
        soft_wrap=True,
    )


@index_app.command("status")
def status_command(
    db: str | None = typer.Option(None, "--db", help="Store URL."),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    folder: Path | None = typer.Option(None, "--index-dir", help="Index folder."),
    verify: bool = typer.Option(
        False, "--verify", help="Read every file and check every block against the seal."
    ),
) -> None:
    """Where the index is, what it holds, and (--verify) whether every file matches its seal."""
    from rich.console import Console
    from rich.markup import escape

    from chexretrieve.app.stores import resolve_read_store
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.index import IndexConfig, IndexUnavailable, index_folder, read_manifest
    from chexretrieve.store import StoreConfig, open_store

    console = Console()
    try:
        url = resolve_read_store(db)
        store = open_store(config=StoreConfig(url=url, create_if_missing=False, read_only=True))
        model = load_encoder(encoder)
        path = index_folder(store, model.encoder_id, IndexConfig(folder=folder))
        manifest = read_manifest(path)
        revision = store.archive_revision()
        store.close()
    except (ValueError, IndexUnavailable) as exc:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if manifest is None:
        console.print(f"no index in {path}: run `chexretrieve index build`", soft_wrap=True)
        raise typer.Exit(1)
    behind = "" if revision == manifest.revision else f" (the store is at revision {revision})"
    console.print(f"index {path}", soft_wrap=True)
    console.print(f"generation {manifest.generation}: {manifest.rows:,} images at archive "
                  f"revision {manifest.revision}{behind}")  # fmt: skip
    for finding, key in sorted(manifest.serving.items()):
        console.print(f"  {finding}: served with {key}")
    for entry in manifest.entries.values():
        calibrated = ", ".join(sorted(entry.get("calibrations", {}))) or "none"
        console.print(f"  features {entry['finding']} · {entry['geometry']} · {entry['anchor_key']}"
                      f" · {entry['dtype']} · calibrated top k: {calibrated}")  # fmt: skip
    if verify:
        from chexretrieve.index.repair import damaged_files

        bad = damaged_files(manifest)
        console.print("every file matches its seal" if not bad else f"damaged: {', '.join(bad)}")
        if bad:
            raise typer.Exit(1)
