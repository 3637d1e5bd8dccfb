"""`chexretrieve ingest --dicomweb URL`: build the configs from options and pull from the PACS.

Exit status as for folders: 0 when every listed study was pulled (rejected instances included),
1 with --strict when an instance was rejected, in conflict or failed to transfer, 2 when the PACS
stopped answering (what arrived is kept; run again to resume) or cannot be used (URL, TLS,
credentials), 130 when interrupted.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from chexretrieve import strict_json

EXIT_STRICT, EXIT_FATAL = 1, 2


def parse_since(value: str | None) -> dt.date | None:
    """YYYY-MM-DD or YYYYMMDD; ValueError otherwise."""
    if value is None:
        return None
    for pattern in ("%Y-%m-%d", "%Y%m%d"):
        try:
            return dt.datetime.strptime(value.strip(), pattern).date()
        except ValueError:
            continue
    raise ValueError(f"--since {value!r} is not a date; write YYYY-MM-DD (e.g. 2024-01-31)")


def run_dicomweb_ingest(
    console,
    *,
    url: str,
    studies: list[str],
    since: str | None,  # noqa: ANN001
    spool: Path | None,
    insecure: bool,
    ca_bundle: Path | None,
    db,  # noqa: ANN001
    encoder_spec: str,
    ingest_config,
    read_config,
    report_path: Path | None,  # noqa: ANN001
    device: str,
    show_progress: bool,
) -> int:
    """Run the pull; returns the exit status (messages go to ``console``)."""
    from rich.markup import escape

    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.ingest.pipeline import IngestError
    from chexretrieve.pacs.client import PacsError
    from chexretrieve.pacs.config import DicomWebConfig
    from chexretrieve.pacs.ingest import ingest_dicomweb
    from chexretrieve.store import open_store

    def fatal(message: str) -> int:
        console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
        return EXIT_FATAL

    try:
        config = DicomWebConfig(
            url=url,
            studies=tuple(s.strip() for s in studies),
            since=parse_since(since),
            spool_dir=spool if spool is not None else Path("dicomweb-spool"),
            verify_tls=not insecure,
            ca_bundle=ca_bundle,
            modalities=read_config.allowed_modalities,
        )
        store = open_store(db)
    except ValueError as exc:
        return fatal(str(exc))
    if insecure:
        console.print("[yellow]warning:[/yellow] TLS certificates are not verified (--insecure)")
    try:
        try:
            encoder = load_encoder(encoder_spec, device)
        except (ValueError, OSError, RuntimeError) as exc:
            return fatal(f"cannot load encoder {encoder_spec!r}: {exc}")
        bar, callback = _progress(console, show_progress)
        try:
            with bar:
                report = ingest_dicomweb(
                    config,
                    store,
                    encoder,
                    ingest_config,
                    read_config=read_config,
                    progress=callback,
                )
        except (PacsError, IngestError) as exc:
            return fatal(str(exc))
    finally:
        store.close()
    summary = report.to_dict()
    console.print(
        f"{report.source}: {summary['studies_complete']} studies complete, "
        f"{summary['studies_partial']} partial, {report.studies_skipped} already complete; "
        f"{report.transferred} instances transferred, {report.already_stored} already stored, "
        f"{len(report.transfer_failures)} failed, {report.retries} retries",
        soft_wrap=True,
    )
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(strict_json.dumps(summary, indent=2))
        console.print(f"report: {report_path}")
    if report.status != "completed":
        return fatal(report.message)
    if ingest_config.strict and report.problems:
        console.print(f"[red]--strict:[/red] {report.problems} instances not stored")
        return EXIT_STRICT
    return 0


def _progress(console, enabled: bool):  # noqa: ANN001, ANN202
    import contextlib

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    if not enabled:
        return contextlib.nullcontext(), None
    bar = Progress(TextColumn("transfer"), BarColumn(), MofNCompleteColumn(), console=console)
    task = bar.add_task("transfer", total=None)

    def callback(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, callback
