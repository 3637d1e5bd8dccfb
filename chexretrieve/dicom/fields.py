"""Every text element of a DICOM file as (name, value) pairs, for display and hardening checks.

Values are returned exactly as decoded, unescaped: escaping for HTML or a terminal is the caller's
job. Nested elements are named by their path, e.g. ``ViewCodeSequence[0].CodeMeaning``; private
elements by their tag, e.g. ``(0009,0010)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pydicom
from pydicom.dataset import Dataset

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile
from chexretrieve.dicom.inflate import check_deflated_size
from chexretrieve.dicom.metadata import element_text
from chexretrieve.dicom.read import _guarded, _open_checked

TEXT_VRS = frozenset(
    {"AE", "AS", "CS", "DA", "DS", "DT", "IS", "LO", "LT", "PN", "SH", "ST", "TM", "UC", "UI", "UR",
     "UT"}
)  # fmt: skip


def list_text_fields(
    path: str | os.PathLike[str], config: ReadConfig | None = None
) -> list[tuple[str, str]]:
    """(name, value) for every non-empty text element, file meta first, in file order.

    Reads the header only (``stop_before_pixels``); nesting deeper than
    ``config.max_sequence_depth`` is rejected like :func:`read_radiograph` does.
    """
    config = config or ReadConfig()
    return _guarded(Path(path), lambda p, notes: _list(p, config))


def _list(path: Path, config: ReadConfig) -> list[tuple[str, str]]:
    found, _ = _open_checked(path, config)
    if found != "dicom":
        raise RejectedFile("not-dicom", "only DICOM files have text fields to list")
    check_deflated_size(path, config)
    ds = pydicom.dcmread(path, force=True, stop_before_pixels=True)
    out: list[tuple[str, str]] = []
    meta = getattr(ds, "file_meta", None)
    if meta is not None:
        _collect(meta, "", 0, config.max_sequence_depth, out)
    _collect(ds, "", 0, config.max_sequence_depth, out)
    return out


def _name(elem) -> str:
    return elem.keyword or f"({elem.tag.group:04X},{elem.tag.element:04X})"


def _collect(ds: Dataset, prefix: str, depth: int, limit: int, out: list[tuple[str, str]]) -> None:
    """Depth-first, iterative (an explicit stack) so hostile nesting cannot exhaust recursion."""
    stack: list[tuple[Dataset, str, int, int]] = [(ds, prefix, depth, 0)]
    while stack:
        dataset, where, level, start = stack.pop()
        tags = list(dataset.keys())
        for position in range(start, len(tags)):
            elem = dataset[tags[position]]
            name = where + _name(elem)
            if elem.VR == "SQ":
                if level + 1 > limit:
                    raise RejectedFile(
                        "too-deep",
                        f"sequences nest deeper than ReadConfig.max_sequence_depth = {limit}",
                    )
                # resume this dataset after the sequence, then walk its items first, in order
                stack.append((dataset, where, level, position + 1))
                items = [item for item in (elem.value or []) if isinstance(item, Dataset)]
                for index in reversed(range(len(items))):
                    stack.append((items[index], f"{name}[{index}].", level + 1, 0))
                break
            if elem.VR in TEXT_VRS:
                text = element_text(elem.value)
                if text is not None:
                    out.append((name, text))
