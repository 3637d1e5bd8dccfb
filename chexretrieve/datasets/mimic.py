"""MIMIC-CXR-JPG 2.0.0 and MIMIC-CXR 2.0.0 (DICOM) as shipped by PhysioNet.

Files (each plain or ``.gz``), recognised by their columns wherever they are given:
* ``mimic-cxr-2.0.0-chexpert.csv`` / ``-negbio.csv``: ``subject_id, study_id`` + 14 observations,
  one row per STUDY (every image of the study gets them); ``--mimic-labels`` picks one;
* ``mimic-cxr-2.0.0-metadata.csv``: ``dicom_id, subject_id, study_id, ViewPosition, StudyDate,
  ...`` one row per image;
* ``mimic-cxr-2.0.0-split.csv``: ``dicom_id, study_id, subject_id, split`` (train / validate /
  test; "validate" is stored as "valid");
* ``cxr-record-list.csv``: ``subject_id, study_id, dicom_id, path`` (the DICOM release's images);
* ``cxr-study-list.csv``: ``subject_id, study_id, path`` (the study's report);
* optional MIMIC-IV ``patients.csv``: ``subject_id, gender, anchor_age`` (sex and age).
Images: ``files/p10/p10000032/s50414267/<dicom_id>.jpg`` (JPG) or ``.dcm`` (DICOM); reports:
``files/p10/p10000032/s50414267.txt``. Patient = subject_id, study = study_id (as digits).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chexretrieve.datasets.entries import (
    DatasetIndex,
    ImageEntry,
    finding_columns,
    normalise_sex,
    normalise_split,
    parse_label,
    view_group_of,
)
from chexretrieve.datasets.tables import find_file, iter_records, read_header

PREFIX = "mimic-cxr-2.0.0-"
LABEL_CHOICES = ("chexpert", "negbio")
SHIPPED_NAMES = (
    f"{PREFIX}chexpert.csv",
    f"{PREFIX}negbio.csv",
    f"{PREFIX}metadata.csv",
    f"{PREFIX}split.csv",
    "cxr-record-list.csv",
    "cxr-study-list.csv",
    "patients.csv",
)
_VIEW_MEANINGS = {
    "postero-anterior": "frontal",
    "antero-posterior": "frontal",
    "lateral": "lateral",
    "left lateral": "lateral",
    "right lateral": "lateral",
}


def classify_mimic_file(path: Path) -> str | None:
    """What a MIMIC file is, by its columns: study-labels, metadata, split, record-list,
    study-list, patients; None when it is none of them."""
    header = set(read_header(path))
    if {"dicom_id", "split"} <= header:
        return "split"
    if {"dicom_id", "ViewPosition"} <= header:
        return "metadata"
    if {"dicom_id", "path"} <= header:
        return "record-list"
    if {"study_id", "path"} <= header:
        return "study-list"
    if {"subject_id", "study_id"} <= header and finding_columns(header):
        return "study-labels"
    if {"subject_id", "gender", "anchor_age"} <= header:
        return "patients"
    return None


@dataclass
class _Files:
    labels: dict[str, Path] = field(default_factory=dict)  # chexpert / negbio / other -> file
    by_kind: dict[str, Path] = field(default_factory=dict)


def _gather(root: Path, extra: Sequence[Path]) -> _Files:
    files = _Files()
    candidates = [p for p in (find_file(root, n) for n in SHIPPED_NAMES) if p is not None]
    for path in [*candidates, *extra]:
        kind = classify_mimic_file(path)
        if kind is None:
            raise ValueError(
                f"{path}: not a MIMIC-CXR file (no dicom_id/split, ViewPosition, path or "
                "subject_id/study_id + finding columns)"
            )
        if kind == "study-labels":
            name = path.name.lower()
            choice = next((c for c in LABEL_CHOICES if c in name), "given")
            files.labels[choice] = path
        else:
            files.by_kind[kind] = path
    return files


def read_mimic(
    root: Path, dataset: str, extra_files: Sequence[Path] = (), label_choice: str = "chexpert"
) -> DatasetIndex:
    """The images of a MIMIC-CXR-JPG (``dataset="mimic-cxr-jpg"``) or MIMIC-CXR DICOM
    (``"mimic-cxr"``) root, with labels, views, dates and splits from its files."""
    if label_choice not in LABEL_CHOICES:
        raise ValueError(f"--mimic-labels {label_choice!r} is not one of {LABEL_CHOICES}")
    files = _gather(root, extra_files)
    labels_file = files.labels.get("given") or files.labels.get(label_choice)
    if labels_file is None and files.labels:
        other = next(iter(files.labels.values()))
        raise ValueError(
            f"--mimic-labels {label_choice} asks for {PREFIX}{label_choice}.csv[.gz] but only "
            f"{other.name} is there; give that file or choose the other labeller"
        )
    study_labels = _study_labels(labels_file) if labels_file else {}
    splits = _by_dicom(files.by_kind.get("split"), "split")
    meta = _by_dicom(files.by_kind.get("metadata"), "metadata")
    patients = _patients(files.by_kind.get("patients"))
    ending = ".dcm" if dataset == "mimic-cxr" else ".jpg"
    images = _image_list(files, meta, splits, ending)
    if not images:
        raise ValueError(
            f"{root}: no image list found: {dataset} needs {PREFIX}metadata.csv[.gz] or "
            f"{PREFIX}split.csv[.gz]" + (" or cxr-record-list.csv.gz" if ending == ".dcm" else "")
        )
    entries = []
    for dicom_id, (subject, study, path) in images.items():
        row = meta.get(dicom_id, {})
        position = (row.get("ViewPosition") or "").upper() or None
        group = view_group_of(position) or _VIEW_MEANINGS.get(
            (row.get("ViewCodeSequence_CodeMeaning") or "").strip().lower()
        )
        sex, age = patients.get(subject, (None, None))
        split_row = splits.get(dicom_id)
        split = normalise_split(split_row["split"], f"split of {dicom_id}") if split_row else None
        entries.append(
            ImageEntry(
                dataset=dataset,
                dataset_path=path,
                patient_id=subject,
                study_key=study,
                view_group=group,
                view_position=position,
                sex=sex,
                age_years=age,
                study_date=_date(row.get("StudyDate", ""), dicom_id),
                split=split,
                labels=study_labels.get((subject, study)),
                dicom_id=dicom_id,
            )
        )
    used = [labels_file] if labels_file is not None else []
    read = tuple(p.name for p in [*used, *files.by_kind.values()])
    index = DatasetIndex(dataset, root, entries, read)
    index.report_files = _report_files(root, files.by_kind.get("study-list"), images)
    if labels_file is not None:
        unlabelled = len({(s, t) for s, t, _ in images.values()} - set(study_labels))
        if unlabelled:
            noun = "study has" if unlabelled == 1 else "studies have"
            index.notes.append(f"{unlabelled} {noun} no row in {labels_file.name}")
    return index


def _study_labels(path: Path) -> dict[tuple[str, str], dict[str, float | None]]:
    header = read_header(path)
    findings = finding_columns(header)
    out: dict[tuple[str, str], dict[str, float | None]] = {}
    for line, row in iter_records(path):
        key = (_digits(row["subject_id"]), _digits(row["study_id"]))
        if key in out:
            raise ValueError(f"{path}:{line}: study {key[1]} appears twice; one row per study")
        out[key] = {findings[c]: parse_label(row[c], f"{path}:{line} {c!r}") for c in findings}
    return out


def _by_dicom(path: Path | None, what: str) -> dict[str, dict[str, str]]:
    if path is None:
        return {}
    out: dict[str, dict[str, str]] = {}
    for line, row in iter_records(path):
        dicom_id = row["dicom_id"]
        if not dicom_id:
            raise ValueError(f"{path}:{line}: empty dicom_id in the {what} file")
        out[dicom_id] = row
    return out


def _patients(path: Path | None) -> dict[str, tuple[str | None, float | None]]:
    if path is None:
        return {}
    out = {}
    for _, row in iter_records(path):
        age = row.get("anchor_age", "")
        out[_digits(row["subject_id"])] = (
            normalise_sex(row.get("gender")),
            float(age) if age.replace(".", "", 1).isdigit() else None,
        )
    return out


def _image_list(files: _Files, meta, splits, ending: str) -> dict[str, tuple[str, str, str]]:  # noqa: ANN001
    """dicom_id -> (subject_id, study_id, path under the root)."""
    images: dict[str, tuple[str, str, str]] = {}
    record_list = files.by_kind.get("record-list")
    if record_list is not None and ending == ".dcm":
        for _, row in iter_records(record_list):
            images[row["dicom_id"]] = (
                _digits(row["subject_id"]),
                _digits(row["study_id"]),
                row["path"].replace("\\", "/"),
            )
        return images
    for source in (meta, splits):
        for dicom_id, row in source.items():
            if dicom_id in images:
                continue
            subject, study = _digits(row["subject_id"]), _digits(row["study_id"])
            images[dicom_id] = (
                subject,
                study,
                f"{study_folder(subject, study)}/{dicom_id}{ending}",
            )
    return images


def study_folder(subject: str, study: str) -> str:
    """files/p10/p10000032/s50414267 for subject 10000032, study 50414267."""
    return f"files/p{subject[:2]}/p{subject}/s{study}"


def _report_files(root: Path, study_list: Path | None, images) -> dict[str, Path]:  # noqa: ANN001
    wanted: dict[str, str] = {}
    if study_list is not None:
        for _, row in iter_records(study_list):
            path = row["path"].replace("\\", "/")
            wanted[_digits(row["study_id"])] = path if path.endswith(".txt") else f"{path}.txt"
    for subject, study, _ in images.values():
        wanted.setdefault(study, f"{study_folder(subject, study)}.txt")
    found = {}
    for study, relative in wanted.items():
        path = root / relative
        if path.is_file():
            found[study] = path
    return found


def _digits(value: str) -> str:
    """'10000032', '10000032.0' or 'p10000032' -> '10000032'."""
    text = value.strip().lstrip("ps")
    if text.endswith(".0"):
        text = text[:-2]
    return text


def _date(value: str, dicom_id: str) -> dt.date | None:
    text = value.strip().split(".")[0]
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y%m%d").date()
    except ValueError:
        raise ValueError(f"StudyDate {value!r} of {dicom_id} is not YYYYMMDD") from None
