"""`chexretrieve ingest`: build the config dataclasses from options and run the pipeline.

It lives in the application layer because it dispatches to three libraries: ``chexretrieve.ingest``
(files and folders), ``chexretrieve.pacs`` (``--dicomweb``) and ``chexretrieve.distributed``
(``--executor ray``), which themselves build on ``chexretrieve.ingest``.

Exit status: 0 when the run completes (rejected files included); 1 with --strict when any file was
rejected or conflicted; 2 on a fatal error (bad path or URL, encoder or labels file that cannot be
loaded, a run that had to stop); 130 when interrupted.
"""

from __future__ import annotations

from pathlib import Path

import typer

EXIT_STRICT = 1
EXIT_FATAL = 2
EXIT_INTERRUPTED = 130
REDUCED_DECODE_HELP = (
    "Decode JPEG and JPEG 2000 at reduced size (faster; such images are then identified by their "
    "compressed data, see docs/ingest.md)."
)


def ingest_command(
    paths: list[Path] = typer.Argument(
        None, help="Folders (walked recursively) or files; or use --dicomweb."
    ),
    db: str | None = typer.Option(
        None,
        "--db",
        help="SQLAlchemy URL of the store (default: $CHEXRETRIEVE_DB, else "
        "sqlite:///chexretrieve.sqlite in the current folder).",
    ),
    encoder: str = typer.Option(
        "phantom", "--encoder", help="Encoder spec: phantom, chexzero:FILE.pt, hf-clip:FOLDER."
    ),
    labels: list[Path] = typer.Option(
        [],
        "--labels",
        help="Labels file (repeatable; .csv or .csv.gz): CheXpert format (Path + finding columns, "
        "1 / 0 / -1 / blank) or MIMIC-CXR's own (chexpert/negbio, metadata, split, record list).",
    ),
    dataset: str = typer.Option(
        "auto",
        "--dataset",
        help="Read PATH as a public data set as shipped: chexpert, mimic-cxr-jpg, mimic-cxr "
        "(DICOM); auto detects it from its files; none reads no data-set files.",
    ),
    mimic_labels: str = typer.Option(
        "chexpert", "--mimic-labels", help="MIMIC-CXR labels to use: chexpert or negbio."
    ),
    reports: list[Path] = typer.Option(
        [],
        "--reports",
        help="Reports CSV to store per study (repeatable): a Report/text column keyed by Path "
        "or study_id. MIMIC's files/p*/p*/s*.txt are stored without it.",
    ),
    workers: int = typer.Option(
        -1, "--workers", help="Decoding processes (-1: one per core minus one; 0: in-process)."
    ),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per encoder call and commit."),
    report: Path | None = typer.Option(
        None, "--report", help="Write a JSON report listing every file's outcome and reason."
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Exit 1 when any file is rejected or conflicts."
    ),
    split: str | None = typer.Option(
        None, "--split", help="Split for images no labels row assigns one to (train/valid/test)."
    ),
    file_timeout: float = typer.Option(
        120.0, "--file-timeout", help="Seconds one file may take to decode."
    ),
    modality: list[str] = typer.Option(
        [], "--modality", help="Admit this DICOM modality (repeatable; default CR and DX)."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    reduced_decode: bool = typer.Option(
        False, "--reduced-decode/--full-decode", help=REDUCED_DECODE_HELP
    ),
    gpu_jpeg: bool = typer.Option(
        False, "--gpu-jpeg", help="Decode JPEG with nvJPEG on the GPU (CUDA and torchvision)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    executor: str = typer.Option(
        "local", "--executor", help="Where decoding and embedding run: local or ray (a cluster)."
    ),
    dicomweb: str | None = typer.Option(
        None, "--dicomweb", help="Pull from a PACS: DICOMweb root URL (instead of PATHS)."
    ),
    study: list[str] = typer.Option(
        [], "--study", help="With --dicomweb: this StudyInstanceUID only (repeatable)."
    ),
    since: str | None = typer.Option(
        None, "--since", help="With --dicomweb: studies dated on or after YYYY-MM-DD."
    ),
    spool: Path | None = typer.Option(
        None, "--spool", help="With --dicomweb: folder keeping the retrieved instances."
    ),
    insecure: bool = typer.Option(
        False, "--insecure", help="With --dicomweb: do not verify TLS certificates."
    ),
    ca_bundle: Path | None = typer.Option(
        None, "--ca-bundle", help="With --dicomweb: PEM file of CAs to verify the PACS against."
    ),
    thumbnail_px: int = typer.Option(
        256, "--thumbnail-px", help="Longest side of the stored result thumbnails (0: none)."
    ),
    thumbnails_only: bool = typer.Option(
        False,
        "--thumbnails-only",
        help="Only add missing thumbnails to the images of --db, read from their files "
        "(for stores ingested before thumbnails existed); no PATHS.",
    ),
    fit_density: bool = typer.Option(
        False,
        "--fit-density/--no-fit-density",
        help="Fit the archive density (OOD flag, rare cases) at the end; searches otherwise "
        "fit it on first use.",
    ),
    index: bool = typer.Option(
        True,
        "--index/--no-index",
        help="Bring the archive index up to date at the end (appends the new images; built in "
        "full on the first ingest); searches read it.",
    ),
) -> None:
    """Ingest DICOM / PNG / JPEG files: decode, embed, store; resumable and idempotent.

    Public data sets as shipped (CheXpert, MIMIC-CXR-JPG, MIMIC-CXR): give the data set's
    root; see docs/datasets.md.
    """
    from rich.console import Console

    console = Console(stderr=True)
    try:
        if thumbnails_only:
            if paths or dicomweb is not None:
                raise typer.Exit(_fatal(console, "--thumbnails-only takes no PATHS or --dicomweb"))
            raise typer.Exit(_thumbnails_only(console, db, thumbnail_px, modality, progress))
        if dicomweb is not None or not paths:
            outcome = _pacs_or_usage(console, paths, dicomweb, study, since, spool, insecure,
                                     ca_bundle, db, encoder, workers, batch_size, report, strict,
                                     split, file_timeout, modality, device, progress,
                                     thumbnail_px)  # fmt: skip
            raise typer.Exit(outcome)
        outcome = _run(
            console,
            paths=paths,
            db=db,
            encoder_spec=encoder,
            labels_paths=labels,
            dataset=dataset,
            mimic_labels=mimic_labels,
            report_csvs=reports,
            workers=workers,
            batch_size=batch_size,
            report_path=report,
            strict=strict,
            split=split,
            file_timeout=file_timeout,
            modalities=modality,
            device=device,
            show_progress=progress,
            executor=executor,
            thumbnail_px=thumbnail_px,
            fit_density=fit_density,
            index=index,
            decoding={"reduced_decode": reduced_decode, "gpu_jpeg": gpu_jpeg},
        )
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]: committed batches are kept; run again to resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(outcome)


def _fatal(console, message: str) -> int:  # noqa: ANN001
    from rich.markup import escape

    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return EXIT_FATAL


def _pacs_or_usage(console, paths, url, studies, since, spool, insecure, ca_bundle, db,  # noqa: ANN001
                   encoder_spec, workers, batch_size, report_path, strict, split, file_timeout,  # noqa: ANN001
                   modalities, device, show_progress, thumbnail_px) -> int:  # noqa: ANN001  # fmt: skip
    """--dicomweb: chexretrieve.pacs does the work; neither PATHS nor --dicomweb: usage error."""
    from chexretrieve.ingest.config import IngestConfig

    if url is None:
        return _fatal(console, "nothing to ingest: give folders or files, or --dicomweb URL")
    if paths:
        return _fatal(console, "give either PATHS or --dicomweb, not both")
    from chexretrieve.pacs.commands import run_dicomweb_ingest

    try:
        config = IngestConfig(workers=workers, batch_size=batch_size, file_timeout_s=file_timeout,
                              strict=strict, split=split, thumbnail_px=thumbnail_px)  # fmt: skip
    except ValueError as exc:
        return _fatal(console, str(exc))
    outcome = run_dicomweb_ingest(
        console, url=url, studies=studies, since=since, spool=spool, insecure=insecure,
        ca_bundle=ca_bundle, db=db, encoder_spec=encoder_spec, ingest_config=config,
        read_config=_read_config(modalities), report_path=report_path, device=device,
        show_progress=show_progress,
    )  # fmt: skip
    if outcome in (0, EXIT_STRICT):
        _update_index(console, db, encoder_spec, device, show_progress)
    return outcome


def _update_index(console, db, encoder_spec: str, device: str, show_progress: bool) -> None:  # noqa: ANN001
    """The archive index brought up to the store after a PACS ingest (its own store handle)."""
    from chexretrieve.app.index_commands import update_after_ingest
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.store import open_store

    with open_store(db) as store:
        update_after_ingest(store, load_encoder(encoder_spec, device), console, show_progress)


def _run(console, *, paths, db, encoder_spec, labels_paths, workers, batch_size, report_path,  # noqa: ANN001
         strict, split, file_timeout, modalities, device, show_progress,  # noqa: ANN001
         executor="local", thumbnail_px=256, dataset="auto", mimic_labels="chexpert",  # noqa: ANN001
         report_csvs=(), fit_density=False, index=True,  # noqa: ANN001
         decoding=None) -> int:  # noqa: ANN001  # fmt: skip
    from chexretrieve.app.dataset_ingest import (
        label_sources,
        store_reports,
        structured_report_files,
    )
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.pipeline import IngestError, ingest_paths
    from chexretrieve.ingest.report import render_summary, write_report
    from chexretrieve.store import open_store

    try:
        config = IngestConfig(
            workers=workers,
            batch_size=batch_size,
            file_timeout_s=file_timeout,
            strict=strict,
            split=split,
            thumbnail_px=thumbnail_px,
            **(decoding or {}),
        )
        read_config = _read_config(modalities)
        for path in paths:
            if not path.exists():
                raise ValueError(f"{path}: no such file or folder; check the path to ingest")
        plan = label_sources(list(paths), list(labels_paths), dataset, mimic_labels)
        label_table = plan.source
        for message in plan.messages:
            console.print(message, soft_wrap=True, markup=False)
        if executor not in ("local", "ray"):
            raise ValueError(f"--executor {executor!r} is not 'local' or 'ray'")
        store = open_store(db)
    except ValueError as exc:
        return _fatal(console, str(exc))
    try:
        try:
            encoder = load_encoder(encoder_spec, device)
        except (ValueError, OSError, RuntimeError) as exc:
            return _fatal(console, f"cannot load encoder {encoder_spec!r}: {exc}")
        progress_bar, callback = _progress(console, show_progress)
        try:
            with progress_bar:
                if executor == "ray":
                    from chexretrieve.distributed import ingest_paths_with_ray

                    report = ingest_paths_with_ray(
                        paths, store, encoder, encoder_spec, config, labels=label_table,
                        read_config=read_config, device=device, progress=callback,
                    )  # fmt: skip
                else:
                    report = ingest_paths(
                        paths,
                        store,
                        encoder,
                        config,
                        labels=label_table,
                        read_config=read_config,
                        progress=callback,
                    )
        except IngestError as exc:
            if report_path is not None and exc.report is not None:
                write_report(exc.report, report_path)
            return _fatal(console, str(exc))
        except ValueError as exc:
            return _fatal(console, str(exc))
        reports_line = None
        sr_files = structured_report_files(report)
        if report_csvs or sr_files or (plan.dataset is not None and plan.dataset.report_files):
            try:
                counts, unmatched = store_reports(store, plan.dataset, list(report_csvs), sr_files)
            except ValueError as exc:
                return _fatal(console, f"images stored; reports not: {exc}")
            reports_line = (
                f"reports: {counts['new']} new, {counts['changed']} changed, "
                f"{counts['unchanged']} unchanged"
                + (f"; {unmatched} report rows matched no stored image" if unmatched else "")
            )
        if fit_density:
            from chexretrieve.app.density_commands import fit_after_ingest

            fit_after_ingest(store, encoder, console)
        if index:
            from chexretrieve.app.index_commands import update_after_ingest

            update_after_ingest(store, encoder, console, show_progress)
    finally:
        store.close()
    from rich.console import Console

    render_summary(report, Console())
    if reports_line is not None:
        Console().print(reports_line, soft_wrap=True, markup=False)
    if report_path is not None:
        console.print(f"report: {write_report(report, report_path)}")
    if config.strict and report.problems:
        console.print(f"[red]--strict:[/red] {report.problems} files rejected or in conflict")
        return EXIT_STRICT
    return 0


def _thumbnails_only(console, db, thumbnail_px: int, modalities, show_progress: bool) -> int:  # noqa: ANN001
    """--thumbnails-only: a thumbnail for each stored image lacking one (or of another size)."""
    from chexretrieve.ingest.thumbnails import backfill_thumbnails
    from chexretrieve.store import StoreConfig, default_db_url, open_store

    if thumbnail_px < 1:
        return _fatal(console, "--thumbnail-px must be at least 1 with --thumbnails-only")
    try:  # a store to complete, never a new empty one
        store = open_store(config=StoreConfig(url=db or default_db_url(), create_if_missing=False))
    except ValueError as exc:
        return _fatal(console, str(exc))
    try:
        progress_bar, callback = _progress(console, show_progress)
        with progress_bar:
            report = backfill_thumbnails(
                store,
                thumbnail_px,
                _read_config(modalities),
                replace_other_sizes=True,
                progress=callback,
            )
    finally:
        store.close()
    console.print(
        f"thumbnails: {report.written} written for {report.images} images; "
        f"{report.missing_files} source files missing, {report.unreadable} unreadable"
    )
    return 0


def _read_config(modalities: list[str]):  # noqa: ANN202
    from chexretrieve.dicom import ReadConfig

    if not modalities:
        return ReadConfig()
    return ReadConfig(allowed_modalities=tuple(m.strip().upper() for m in modalities))


def _progress(console, enabled: bool):  # noqa: ANN001, ANN202
    import contextlib

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:  # noqa: ANN001
            speed = task.finished_speed or task.speed
            return Text("-- files/s" if speed is None else f"{speed:.1f} files/s")

    if not enabled:
        return contextlib.nullcontext(), None
    bar = Progress(
        TextColumn("ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )
    task = bar.add_task("ingest", total=None)

    def callback(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, callback
