"""CheXpert (v1.0 and v1.0-small) as shipped: ``train.csv``, ``valid.csv`` (and ``test.csv``).

Columns: ``Path, Sex, Age, Frontal/Lateral, AP/PA`` and the 14 observation columns (``No Finding``
is not one of the 13 findings the project retrieves by and is not kept). A Path reads
``CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg``: the patient is
``patient00001``, the study ``patient00001/study1``, the view ``Frontal/Lateral`` (else the file
name). The split is the CSV's: train.csv -> train, valid.csv -> valid, test.csv or
test_labels.csv -> test. The root given may be the folder holding the CSVs or its parent.

The official test set's radiologist labels, ``groundtruth.csv`` (beside the CSVs or in
``test/``), are per study: a ``Study`` column (``test/patient64741/study1``) and the observation
columns. Every image file in that study's folder gets the study's labels and the ``test`` split
(an image a per-image CSV lists keeps that CSV's row).
"""

from __future__ import annotations

from pathlib import Path

from chexretrieve.datasets.entries import (
    DatasetIndex,
    ImageEntry,
    finding_columns,
    normalise_sex,
    parse_label,
)
from chexretrieve.datasets.tables import find_file, iter_records, read_header, require_columns

DATASET = "chexpert"
#: label files and the split of their rows; the test set's labels (released apart) are read
#: under either name, with at least a Path column and the observations
CSV_SPLITS = (
    ("train.csv", "train"),
    ("valid.csv", "valid"),
    ("test.csv", "test"),
    ("test_labels.csv", "test"),
)
REQUIRED = ("Path",)
#: the official test set's labels, one row per study (``Study``); where it may be
STUDY_LABELS = "groundtruth.csv"
STUDY_LABEL_PLACES = ("", "test")
IMAGE_ENDINGS = (".jpg", ".jpeg", ".png")
SHIPPED_COLUMNS = ("Path", "Sex", "Age", "Frontal/Lateral", "AP/PA")


def chexpert_folder(root: Path) -> Path | None:
    """The folder holding train.csv / valid.csv: ``root`` itself or one CheXpert-v1.0* below it."""
    if any(find_file(root, name) for name, _ in CSV_SPLITS):
        return root
    for child in sorted(root.glob("CheXpert-v1.0*")):
        if child.is_dir() and any(find_file(child, name) for name, _ in CSV_SPLITS):
            return child
    return None


def looks_shipped(folder: Path) -> bool:
    """Whether the folder's train.csv / valid.csv are CheXpert's own: its columns, and Paths
    that start with the release folder (``CheXpert-v1.0-small/`` or ``CheXpert-v1.0/``)."""
    for name, _ in CSV_SPLITS:
        path = find_file(folder, name)
        if path is None:
            continue
        try:
            header = read_header(path)
            if not set(SHIPPED_COLUMNS) <= set(header):
                return False
            first = next(iter_records(path), None)
        except ValueError:
            return False
        return first is not None and first[1]["Path"].startswith("CheXpert-v1.0")
    return False


def read_chexpert(root: Path) -> DatasetIndex:
    folder = chexpert_folder(root)
    if folder is None:
        raise ValueError(
            f"{root}: no train.csv or valid.csv here or in a CheXpert-v1.0*/ folder below it; "
            "give the CheXpert folder as downloaded"
        )
    entries: list[ImageEntry] = []
    read: list[str] = []
    for name, split in CSV_SPLITS:
        path = find_file(folder, name)
        if path is not None:
            entries += read_chexpert_csv(path, split)
            read.append(path.name)
    for place in STUDY_LABEL_PLACES:
        path = find_file(folder / place if place else folder, STUDY_LABELS)
        if path is not None:
            listed = {e.dataset_path.split("/", 1)[-1] for e in entries} | {
                e.dataset_path for e in entries
            }
            entries += [e for e in read_study_labels(path, folder) if e.dataset_path not in listed]
            read.append(str(path.relative_to(folder)))
            break
    return DatasetIndex(DATASET, folder, entries, tuple(read))


def read_study_labels(path: Path, folder: Path) -> list[ImageEntry]:
    """The entries of the test set's ``groundtruth.csv``: each image file of each listed study
    (found under ``folder``), with the study's labels and the ``test`` split."""
    header = read_header(path)
    require_columns(path, header, ("Study",), "CheXpert's groundtruth.csv")
    findings = finding_columns(header)
    entries = []
    for line, row in iter_records(path):
        where = f"{path}:{line}"
        study_path = row["Study"].replace("\\", "/").strip().strip("/")
        if not study_path:
            raise ValueError(f"{where}: empty Study")
        labels = {findings[c]: parse_label(row[c], f"{where} column {c!r}") for c in findings}
        entries += [
            _entry(f"{study_path}/{image.name}", {}, "test", labels, where)
            for image in _study_images(folder, study_path)
        ]
    return entries


def _study_images(folder: Path, study_path: str) -> list[Path]:
    """The image files of one study's folder (the Study path under ``folder`` or its parent,
    with or without the release folder's name in front)."""
    tail = study_path.split("/", 1)[1] if study_path.startswith("CheXpert-v1.0") else study_path
    for base in (folder / tail, folder.parent / study_path, folder / study_path):
        if base.is_dir():
            return sorted(p for p in base.iterdir() if p.suffix.lower() in IMAGE_ENDINGS)
    return []


def read_chexpert_csv(path: Path, split: str | None) -> list[ImageEntry]:
    """The entries of one CheXpert CSV (``split`` for all of its rows)."""
    header = read_header(path)
    require_columns(path, header, REQUIRED, "a CheXpert CSV")
    findings = finding_columns(header)
    entries = []
    for line, row in iter_records(path):
        where = f"{path}:{line}"
        dataset_path = row["Path"].replace("\\", "/")
        if not dataset_path:
            raise ValueError(f"{where}: empty Path")
        labels = {findings[c]: parse_label(row[c], f"{where} column {c!r}") for c in findings}
        entries.append(_entry(dataset_path, row, split, labels, where))
    return entries


def _entry(dataset_path: str, row: dict, split: str | None, labels: dict, where: str):
    """One image's entry; ``row``'s Sex, Age, Frontal/Lateral and AP/PA when it has them."""
    patient, study = _patient_and_study(dataset_path)
    return ImageEntry(
        dataset=DATASET,
        dataset_path=dataset_path,
        patient_id=patient,
        study_key=f"{patient}/{study}" if patient and study else None,
        view_group=_view_group(row.get("Frontal/Lateral", ""), dataset_path),
        view_position=(row.get("AP/PA") or "").upper() or None,
        sex=normalise_sex(row.get("Sex")),
        age_years=_age(row.get("Age", ""), where),
        split=split,
        labels=labels or None,
    )


def _patient_and_study(path: str) -> tuple[str | None, str | None]:
    parts = path.split("/")
    patient = next((p for p in parts if p.startswith("patient")), None)
    study = next((p for p in parts if p.startswith("study")), None)
    return patient, study


def _view_group(value: str, path: str) -> str | None:
    text = value.strip().lower() or Path(path).stem.lower()
    if "frontal" in text:
        return "frontal"
    if "lateral" in text:
        return "lateral"
    return None


def _age(value: str, where: str) -> float | None:
    text = value.strip()
    if not text:
        return None
    try:
        age = float(text)
    except ValueError:
        raise ValueError(f"{where}: Age {value!r} is not a number") from None
    return age if 0 <= age < 150 else None
