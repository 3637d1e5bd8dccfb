"""One image of a data set as its own files describe it, and the index an ingest matches files to.

Normalised values (what the store keeps):
* ``view_group``: "frontal" or "lateral" (None when the data set does not say);
* ``view_position``: upper case as shipped (CheXpert's AP/PA column, MIMIC's ViewPosition: PA, AP,
  LATERAL, LL, ...); None when blank;
* ``sex``: "M", "F" or None (CheXpert "Unknown", blank);
* ``split``: "train", "valid" or "test" (MIMIC's "validate" is "valid");
* labels: canonical finding -> 1.0 / 0.0 / -1.0 / None (blank); columns that are not one of the
  13 findings (such as "No Finding") are not kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from chexretrieve.findings import canonical_finding

SPLIT_NAMES = {"train": "train", "valid": "valid", "validation": "valid", "validate": "valid",
               "val": "valid", "test": "test"}  # fmt: skip
FRONTAL_POSITIONS = frozenset({"PA", "AP", "AP AXIAL", "PA LLD", "AP LLD", "AP RLD", "PA RLD"})
LATERAL_POSITIONS = frozenset({"LATERAL", "LL", "RL", "LAT", "XTABLE LATERAL", "LAO", "RAO"})


def view_group_of(view_position: str | None) -> str | None:
    """'frontal' for PA/AP (and their decubitus / axial forms), 'lateral' for LL/RL/LATERAL."""
    if not view_position:
        return None
    value = " ".join(str(view_position).upper().replace("_", " ").split())
    if value in FRONTAL_POSITIONS or value.startswith(("PA", "AP")):
        return "frontal"
    if value in LATERAL_POSITIONS or "LAT" in value:
        return "lateral"
    return None


def normalise_split(value: str | None, where: str) -> str | None:
    text = (value or "").strip().lower()
    if not text:
        return None
    if text not in SPLIT_NAMES:
        raise ValueError(f"{where}: split {value!r} is not one of train, valid(ate), test")
    return SPLIT_NAMES[text]


def normalise_sex(value: str | None) -> str | None:
    text = (value or "").strip().upper()
    if text in ("M", "MALE"):
        return "M"
    if text in ("F", "FEMALE"):
        return "F"
    return None


def parse_label(value: str, where: str) -> float | None:
    """'1' / '1.0' -> 1.0, '0' -> 0.0, '-1' -> -1.0 (uncertain), '' -> None (not mentioned)."""
    text = value.strip()
    if text == "" or text.lower() == "nan":
        return None
    try:
        number = float(text)
    except ValueError:
        number = float("inf")
    if number not in (1.0, 0.0, -1.0):
        raise ValueError(f"{where}: {value!r} is not 1, 0, -1 (uncertain) or blank")
    return number


def finding_columns(header: Iterable[str]) -> dict[str, str]:
    """CSV column -> canonical finding, for the columns that are one of the 13 findings."""
    found: dict[str, str] = {}
    for name in header:
        try:
            found[name] = canonical_finding(name)
        except ValueError:
            continue
    return found


def derived_study_uid(dataset: str, study_key: str) -> str:
    """A DICOM UID under 2.25 fixed by (data set, study): the views of one study share a study."""
    digest = hashlib.sha256(f"{dataset}\0{study_key}".encode()).hexdigest()
    return "2.25." + str(int(digest[:32], 16))


@dataclass(frozen=True)
class ImageEntry:
    """One image as the data set's files describe it; None = the files do not say."""

    dataset: str  # "chexpert", "mimic-cxr-jpg" or "mimic-cxr"
    dataset_path: str  # the path as the data set names it (relative to its root)
    patient_id: str | None = None
    study_key: str | None = None  # the data set's study id (MIMIC study_id, CheXpert patient/study)
    view_group: str | None = None
    view_position: str | None = None
    sex: str | None = None
    age_years: float | None = None
    study_date: dt.date | None = None
    split: str | None = None
    labels: dict[str, float | None] | None = None  # None: the study has no labels row
    dicom_id: str | None = None
    line: int = 0  # position in the index (for the matched-rows count)

    def image_fields(self, source_format: str | None) -> dict[str, object]:
        """The store's image columns this entry sets (only what it knows). A PNG/JPEG's study UID
        is made from the data set's study id so that its views share one study; a DICOM file
        keeps its own StudyInstanceUID."""
        values = {
            "patient_id": self.patient_id,
            "patient_sex": self.sex,
            "patient_age_years": self.age_years,
            "study_date": self.study_date,
            "view_position": self.view_position,
            "view_group": self.view_group,
            "dataset_path": self.dataset_path,
            "dataset_study_id": self.study_key,
        }
        if self.study_key and source_format != "dicom":
            values["study_uid"] = derived_study_uid(self.dataset, self.study_key)
        return {name: value for name, value in values.items() if value is not None}


@dataclass
class DatasetIndex:
    """Every image entry of one data set, found by path relative to its root or by DICOM id.

    Duck-compatible with ``chexretrieve.ingest.labels.LabelTable`` for the ingest pipeline:
    ``match(file, root)``, ``source``, ``rows`` and ``unmatched_rows``.
    """

    dataset: str
    root: Path
    rows: list[ImageEntry]
    files_read: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    #: data-set study id -> its report file (read when the reports are stored)
    report_files: dict[str, Path] = field(default_factory=dict)
    _by_path: dict[str, ImageEntry] = field(default_factory=dict, repr=False)
    _by_dicom_id: dict[str, ImageEntry] = field(default_factory=dict, repr=False)
    _matched: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.rows = [
            entry if entry.line else _with_line(entry, n) for n, entry in enumerate(self.rows, 1)
        ]
        for entry in self.rows:
            key = _path_key(entry.dataset_path)
            if key in self._by_path:
                raise ValueError(
                    f"{self.dataset}: the image {entry.dataset_path!r} is listed twice; each image "
                    "needs one row"
                )
            self._by_path[key] = entry
            if self.dataset == "chexpert" and "/" in key:  # the folder may have been renamed
                self._by_path.setdefault(key.split("/", 1)[1], entry)
            if entry.dicom_id:
                self._by_dicom_id.setdefault(entry.dicom_id, entry)

    @property
    def source(self) -> str:
        files = ", ".join(self.files_read) or "no files"
        return f"{self.dataset} at {self.root} ({files})"

    def match(self, file: Path, root: Path | None = None) -> ImageEntry | None:
        """The entry of ``file``: by its path under the data-set root (any trailing part of the
        path that the data set lists), else by its name without ending (MIMIC's dicom_id)."""
        parts = PurePosixPath(Path(file).absolute().as_posix()).parts
        entry = None
        for start in range(1, len(parts)):
            entry = self._by_path.get(_path_key("/".join(parts[start:])))
            if entry is not None:
                break
        if entry is None:
            entry = self._by_dicom_id.get(Path(file).stem)
        if entry is not None:
            self._matched.add(entry.line)
        return entry

    @property
    def unmatched_rows(self) -> int:
        return len(self.rows) - len(self._matched)


def _with_line(entry: ImageEntry, line: int) -> ImageEntry:
    from dataclasses import replace

    return replace(entry, line=line)


def _path_key(path: str) -> str:
    text = path.replace("\\", "/")
    while text.startswith("./"):
        text = text[2:]
    return text.lstrip("/")
