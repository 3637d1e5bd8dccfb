"""Radiology reports: MIMIC's per-study ``.txt`` files and a reports CSV keyed by path or study.

A reports CSV has a text column (``Report``, ``report``, ``text`` or ``findings_impression``) and a
key column: ``Path`` / ``path`` / ``path_to_image`` (an image path: the report belongs to that
image's study; CheXpert Plus's CSV is read so) or ``study_id`` / ``Study`` (the study itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chexretrieve.datasets.tables import iter_records, read_header

TEXT_COLUMNS = ("Report", "report", "text", "findings_impression")
#: CheXpert Plus's df_chexpert_plus_*.csv keys its ``report`` by ``path_to_image``
PATH_COLUMNS = ("Path", "path", "path_to_image")
STUDY_COLUMNS = ("study_id", "Study", "study")


@dataclass(frozen=True)
class ReportRow:
    key_kind: str  # "path" or "study"
    key: str
    text: str
    source: str  # "file.csv:line"


def read_reports_csv(path: str | Path) -> list[ReportRow]:
    """Rows of a reports CSV (blank reports skipped); ValueError names what is missing."""
    source = Path(path)
    header = read_header(source)
    text_column = next((c for c in TEXT_COLUMNS if c in header), None)
    key_column = next((c for c in (*PATH_COLUMNS, *STUDY_COLUMNS) if c in header), None)
    if text_column is None or key_column is None:
        raise ValueError(
            f"{source}: a reports CSV needs a text column ({', '.join(TEXT_COLUMNS)}) and a key "
            f"column ({', '.join(PATH_COLUMNS + STUDY_COLUMNS)}); it has {header}"
        )
    kind = "path" if key_column in PATH_COLUMNS else "study"
    rows = []
    for line, row in iter_records(source):
        text, key = row[text_column], row[key_column].replace("\\", "/")
        if text and key:
            if kind == "study":
                key = key.lstrip("s") if key[:1] == "s" and key[1:].isdigit() else key
            rows.append(ReportRow(kind, key, text, f"{source.name}:{line}"))
    return rows


def read_report_file(path: Path) -> str:
    """A report ``.txt`` as text (UTF-8, undecodable bytes replaced); ValueError if unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as exc:
        raise ValueError(f"cannot read report {path}: {exc.strerror}") from None
