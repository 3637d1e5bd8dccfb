"""The end of an ingest run: the JSON report file and the summary tables."""

from __future__ import annotations

from pathlib import Path

from chexretrieve import strict_json
from chexretrieve.ingest.pipeline import IngestReport

#: what each ingest-level reason code means (reader codes are in chexretrieve.dicom.errors)
INGEST_REASONS = {
    "timeout": "decoding took longer than IngestConfig.file_timeout_s; the worker was stopped",
    "worker-crash": "the decoding process died (codec crash, memory cap)",
    "embed-error": "the encoder failed on this image",
    "unreadable": "the file could not be opened or read",
    "same-uid-different-pixels": "conflict: the SOPInstanceUID is stored with other pixels",
}


#: the summary table's words for each outcome (the JSON report keeps the short names)
OUTCOME_WORDS = {
    "ingested": "ingested (new images: decoded, embedded, stored)",
    "embedded": "embedding added (images stored before)",
    "already-present": "already stored (nothing new)",
    "rejected": "rejected (reasons below)",
    "conflict": "conflict with a stored image (reasons below)",
}


def write_report(report: IngestReport, path: str | Path) -> Path:
    """Write the JSON report (every file with its outcome and reason); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".partial")
    temporary.write_text(strict_json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    temporary.replace(target)
    return target


def data_set_warnings(report: IngestReport) -> list[str]:
    """Plain lines on what the data set's files do to the archive: byte-identical copies (the
    image keeps its first file's split) and patients in several splits."""
    lines = []
    copies = report.changes.get("copies", 0)
    if copies:
        other = report.changes.get("copies in another split", 0)
        example = next(o for o in report.outcomes if o.detail and "byte-identical" in o.detail)
        verb = "is a byte-identical copy" if copies == 1 else "are byte-identical copies"
        where = f" ({other} meant for another split)" if other else ""
        lines.append(
            f"{copies} file{'s' if copies != 1 else ''} {verb} of an image stored from another "
            f"file{where}; e.g. {example.path}: {example.detail}"
        )
    count, examples = report.patients_in_several_splits
    if count:
        named = "; ".join(f"{p}: {', '.join(splits)}" for p, splits in examples)
        lines.append(
            f"{count} patient{' has' if count == 1 else 's have'} images in two or more splits "
            f"({named}{'; ...' if count > len(examples) else ''}); an evaluation across those "
            "splits refuses them unless --allow-patient-overlap"
        )
    return lines


def render_summary(report: IngestReport, console) -> None:  # noqa: ANN001
    """Print the outcome counts and the reason counts as rich tables."""
    from rich.markup import escape
    from rich.table import Table

    counts = report.counts
    total = sum(counts.values())
    rate = total / report.seconds if report.seconds > 0 else 0.0
    console.print(
        f"ingest run {report.run_id} {report.status}: {total} files in {report.seconds:.1f} s "
        f"({rate:.1f} files/s)",
        soft_wrap=True,
    )
    table = Table()
    table.add_column("outcome")
    table.add_column("files", justify="right")
    for name, count in counts.items():
        if count or (name == "ingested" and not total):  # no row of zeros to puzzle over
            table.add_row(OUTCOME_WORDS[name], str(count))
    if report.skipped_files:
        table.add_row("[dim]skipped (other endings, hidden)[/dim]", str(report.skipped_files))
    console.print(table)
    if report.reasons:
        reasons = Table()
        reasons.add_column("rejected / conflict reason")
        reasons.add_column("files", justify="right")
        reasons.add_column("example")
        examples = {}
        for outcome in report.outcomes:
            if outcome.reason and outcome.reason not in examples:
                examples[outcome.reason] = outcome.detail or Path(outcome.path).name
        for reason, count in report.reasons.items():
            example = examples.get(reason, "")
            reasons.add_row(reason, str(count), escape(example[:100]))
        console.print(reasons)
    if report.labels_file:
        console.print(
            f"labels: {report.labelled_files} files matched rows of {escape(report.labels_file)}; "
            f"{report.unmatched_label_rows} rows matched no file",
            soft_wrap=True,
        )
    changes = report.changes
    if sum(changes.get(k, 0) for k in ("labels", "splits", "metadata", "unchanged")):
        console.print(
            f"images already stored: {changes.get('labels', 0)} labels changed, "
            f"{changes.get('splits', 0)} splits changed, {changes.get('metadata', 0)} other "
            f"data-set fields changed, {changes.get('unchanged', 0)} unchanged",
            soft_wrap=True,
        )
    for line in data_set_warnings(report):
        console.print(f"[yellow]{escape(line)}[/yellow]", soft_wrap=True)
    console.print(
        f"encoder {escape(report.encoder_id)} -> {escape(report.database)}", soft_wrap=True
    )
