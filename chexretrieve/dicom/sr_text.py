"""The text of a DICOM Structured Report (Basic / Enhanced / Comprehensive SR): the report a
PACS stores beside the images, read so that ingest can keep it per study.

The content tree is walked in document order; each TEXT item gives ``"<concept name>: <text>"``
(just the text when it has no concept name), CONTAINER items with a concept name give it as a
heading line. Other value types (codes, numbers, image references) are left out.
"""

from __future__ import annotations

from pathlib import Path

import pydicom
from pydicom.errors import InvalidDicomError

#: SOP classes under this root are structured reports (88.x)
SR_CLASS_ROOT = "1.2.840.10008.5.1.4.1.1.88."
_MAX_DEPTH = 32


def read_sr_text(path: str | Path) -> tuple[str, str] | None:
    """(StudyInstanceUID, report text) of an SR file; None when the file is no SR or holds no
    text. Unreadable files give None too (ingest has already reported them)."""
    try:
        ds = pydicom.dcmread(str(path), force=True, stop_before_pixels=True)
    except (InvalidDicomError, OSError, ValueError, EOFError, AttributeError):
        return None
    sop_class = str(ds.get("SOPClassUID", ""))
    study_uid = str(ds.get("StudyInstanceUID", "") or "").strip()
    if not sop_class.startswith(SR_CLASS_ROOT) or not study_uid:
        return None
    lines: list[str] = []
    _walk(ds, lines, 0)
    text = "\n".join(line for line in lines if line.strip())
    return (study_uid, text) if text else None


def _concept(item) -> str:  # noqa: ANN001
    names = item.get("ConceptNameCodeSequence")
    if not names:
        return ""
    return str(names[0].get("CodeMeaning", "") or "").strip()


def _walk(node, lines: list[str], depth: int) -> None:  # noqa: ANN001
    if depth > _MAX_DEPTH:
        return
    for item in node.get("ContentSequence", None) or ():
        kind = str(item.get("ValueType", "")).upper()
        name = _concept(item)
        if kind == "TEXT":
            value = " ".join(str(item.get("TextValue", "") or "").split())
            if value:
                lines.append(f"{name}: {value}" if name else value)
        elif kind == "CONTAINER" and name:
            lines.append(name.upper())
        _walk(item, lines, depth + 1)
