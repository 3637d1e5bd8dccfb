"""Which public data set a folder holds, and reading it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from chexretrieve.datasets.chexpert import chexpert_folder, looks_shipped, read_chexpert
from chexretrieve.datasets.entries import DatasetIndex
from chexretrieve.datasets.mimic import PREFIX, read_mimic
from chexretrieve.datasets.tables import find_file

LAYOUTS = ("chexpert", "mimic-cxr-jpg", "mimic-cxr")


def detect_layout(root: Path) -> str | None:
    """'mimic-cxr' (cxr-record-list.csv[.gz]), 'mimic-cxr-jpg' (mimic-cxr-2.0.0-*.csv[.gz]) or
    'chexpert' (CheXpert's own train.csv / valid.csv here or in CheXpert-v1.0*/, Paths starting
    CheXpert-v1.0); None for another folder (a CheXpert-format CSV of another archive, such as
    a phantom archive's, is read only with --dataset chexpert)."""
    root = Path(root)
    if not root.is_dir():
        return None
    if find_file(root, "cxr-record-list.csv") is not None:
        return "mimic-cxr"
    names = ("metadata", "split", "chexpert", "negbio")
    if any(find_file(root, f"{PREFIX}{name}.csv") for name in names):
        return "mimic-cxr-jpg"
    folder = chexpert_folder(root)
    if folder is not None and looks_shipped(folder):
        return "chexpert"
    return None


def load_dataset(
    root: Path,
    kind: str | None = None,
    *,
    extra_files: Sequence[Path] = (),
    mimic_labels: str = "chexpert",
) -> DatasetIndex:
    """Read the data set at ``root`` (``kind`` one of LAYOUTS, or None to detect it).

    ``extra_files``: more of the data set's own files given apart (e.g. the MIMIC-CXR-JPG label
    files for the DICOM release); ValueError says what is missing or malformed.
    """
    root = Path(root).expanduser().absolute()
    if not root.is_dir():
        raise ValueError(f"{root}: the data-set root must be a folder")
    if kind is None:
        kind = detect_layout(root)
        if kind is None:
            raise ValueError(
                f"{root}: not a CheXpert, MIMIC-CXR-JPG or MIMIC-CXR folder as shipped (no "
                "train.csv/valid.csv, mimic-cxr-2.0.0-*.csv[.gz] or cxr-record-list.csv[.gz]); "
                "name the layout with --dataset or ingest it as plain files with --labels"
            )
    if kind not in LAYOUTS:
        raise ValueError(f"--dataset {kind!r} is not one of {', '.join(LAYOUTS)}")
    if kind == "chexpert":
        if extra_files:
            raise ValueError("CheXpert's label files are its own CSVs; give them with the root")
        return read_chexpert(root)
    return read_mimic(root, kind, list(extra_files), mimic_labels)
