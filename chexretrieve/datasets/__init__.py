"""Public chest X-ray data sets read as they ship: CheXpert, MIMIC-CXR-JPG and MIMIC-CXR (DICOM).

``load_dataset(root, kind)`` reads a data set's own files (label CSVs, metadata, splits, record
lists, reports; ``.csv.gz`` read transparently) into a :class:`DatasetIndex`: one
:class:`ImageEntry` per image with its patient, study, view, sex, age, study date, split and
labels, matched to the files an ingest finds. ``detect_layout(root)`` names the layout of a folder.
Nothing here touches the store or decodes pixels.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DatasetIndex": "chexretrieve.datasets.entries",
    "ImageEntry": "chexretrieve.datasets.entries",
    "view_group_of": "chexretrieve.datasets.entries",
    "LAYOUTS": "chexretrieve.datasets.detect",
    "detect_layout": "chexretrieve.datasets.detect",
    "load_dataset": "chexretrieve.datasets.detect",
    "open_text": "chexretrieve.datasets.tables",
    "read_reports_csv": "chexretrieve.datasets.reports",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):  # noqa: ANN202
    if name not in _EXPORTS:
        raise AttributeError(f"module 'chexretrieve.datasets' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
