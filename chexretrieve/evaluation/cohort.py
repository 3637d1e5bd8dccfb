"""Which images an evaluation may use: views, patients, and splits that must not share patients.

The label columns read here, in the order they are looked for:

* view: ``view_group`` ("frontal" / "lateral" / "", a store's ingest), ``Frontal/Lateral``
  (CheXpert), ``view_position_group`` / ``frontal_lateral`` (older tables), ``view_position``
  (DICOM ViewPosition: AP/PA frontal, LATERAL/LL/RL lateral), ``AP/PA`` (a table that records only
  the projection, all frontal: the phantom world);
* patient: ``patient_id`` (a store's ingest, CheXpert's ``patientNNNNN`` from ``Path``, the phantom
  world), ``subject_id`` (MIMIC);
* data-set name of an image (report files): ``dataset_path``, ``Path``, ``source_path``.

``views="frontal"`` (the default, as CheXzero evaluates) keeps the images known to be frontal; an
image whose view is unknown is left out and counted. A source that records no view at all is used
whole, and the report says so. The patient-overlap check refuses a query split and a key split that
share patients (a query would find its own patient's other images), unless allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from chexretrieve.evaluation.config import ProtocolConfig


class LabelledArchive(Protocol):
    """What is read of an ``evaluation.protocol.LabelledArchive`` (which imports this module)."""

    image_ids: np.ndarray
    splits: np.ndarray
    labels: pd.DataFrame

    def __len__(self) -> int: ...


VIEW_COLUMNS = (
    "view_group",
    "Frontal/Lateral",
    "view_position_group",
    "frontal_lateral",
    "view_position",
    "AP/PA",
)
PATIENT_COLUMNS = ("patient_id", "subject_id")
NAME_COLUMNS = ("dataset_path", "Path", "source_path")
#: DICOM ViewPosition values of lateral projections (the rest starting AP/PA are frontal)
LATERAL_POSITIONS = {"LATERAL", "LL", "RL", "LAT", "XTABLE LATERAL", "LATERAL DECUBITUS"}


class PatientOverlapError(ValueError):
    """The query split and the key split share patients (and the overlap was not allowed)."""


def _view_of(value, column: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or pd.isna(value):
        return ""
    text = str(value).strip()
    if column in ("view_position", "AP/PA"):
        upper = text.upper()
        if upper in LATERAL_POSITIONS:
            return "lateral"
        return "frontal" if upper.startswith(("AP", "PA")) else ""
    lower = text.lower()
    if lower.startswith("frontal"):
        return "frontal"
    return "lateral" if lower.startswith("lateral") else ""


def view_groups(labels: pd.DataFrame) -> tuple[np.ndarray | None, str | None]:
    """("frontal" / "lateral" / "" per image, the column read), or (None, None) without one."""
    for column in VIEW_COLUMNS:
        if column in labels.columns:
            values = labels[column].to_numpy(dtype=object)
            groups = np.array([_view_of(v, column) for v in values], dtype=object)
            if (groups != "").any():  # a column of blanks says nothing: try the next one
                return groups.astype(str), column
    return None, None


def _first_column(labels: pd.DataFrame, columns) -> str | None:
    for column in columns:
        if column in labels.columns and labels[column].notna().any():
            return column
    return None


def patient_ids(archive: LabelledArchive) -> tuple[np.ndarray, str | None]:
    """Each image's patient (the cluster of the bootstrap), and the column read. An image without
    one is its own patient ("image:<id>"); without a patient column every image is."""
    column = _first_column(archive.labels, PATIENT_COLUMNS)
    own = np.array([f"image:{i}" for i in archive.image_ids], dtype=object)
    if column is None:
        return own.astype(str), None
    raw = archive.labels[column].to_numpy(dtype=object)
    missing = pd.isna(raw) | (pd.Series(raw).astype(str).str.strip() == "").to_numpy()
    out = np.where(missing, own, pd.Series(raw).astype(str).to_numpy())
    return out.astype(str), column


def dataset_names(archive: LabelledArchive) -> np.ndarray:
    """Each image's data-set path (or id): what a report names it by, never a store id alone."""
    column = _first_column(archive.labels, NAME_COLUMNS)
    ids = np.asarray(archive.image_ids).astype(str)
    if column is None:
        return ids
    raw = archive.labels[column]
    return np.where(raw.isna().to_numpy(), ids, raw.astype(str).to_numpy()).astype(str)


@dataclass(frozen=True)
class Cohort:
    """The images the protocol may use (before the per-finding label rules) and how they were
    chosen; the report's Protocol paragraph states these facts."""

    usable: np.ndarray  # (n,) bool: in the chosen views
    views: str  # the setting: frontal | lateral | all
    view_column: str | None  # the label column the views came from (None: the source has none)
    view_counts: dict[str, int]  # images per view group among the query and key splits
    excluded_by_view: int  # query/key-split images left out by the view setting
    patients: np.ndarray  # (n,) str: patient of each image (the bootstrap's cluster)
    patient_column: str | None  # None: no patient ids; every image is its own patient
    overlap: tuple[str, ...] = ()  # patients with used images in both the query and key split
    overlap_allowed: bool = False
    notes: list[str] = field(default_factory=list)


def select_cohort(archive: LabelledArchive, config: ProtocolConfig) -> Cohort:
    """The view filter and the patient-overlap check of ``config`` applied to ``archive``.

    PatientOverlapError (a ValueError) names how many patients the two splits share and a few of
    them, unless ``config.allow_patient_overlap``; ValueError when a split holds no image (naming
    the splits there are) or lateral views are asked of a source that records none."""
    splits = np.asarray(archive.splits).astype(str)
    present = {str(k): int(v) for k, v in zip(*np.unique(splits, return_counts=True), strict=True)}
    for role, name, option in (
        ("query", config.query_split, "--query-split"),
        ("key", config.key_split, "--key-split"),
    ):
        if name not in present:
            found = ", ".join(
                f"{k or '(none)'} ({v} image{'s' if v != 1 else ''})" for k, v in present.items()
            )
            raise ValueError(
                f"no image is in the {role} split {name!r}; the splits here are: {found}. "
                f"Choose another with {option}"
            )
    in_splits = np.isin(splits, [config.query_split, config.key_split])
    groups, column = view_groups(archive.labels)
    notes: list[str] = []
    if groups is None:
        if config.views == "lateral":
            raise ValueError(
                "views='lateral' but the labels record no view (looked for "
                f"{', '.join(VIEW_COLUMNS)}); use views 'all' or 'frontal', or add the column"
            )
        usable = np.ones(len(archive), dtype=bool)
        counts = {"unknown": int(in_splits.sum())}
        if config.views == "frontal":
            notes.append("the source records no view, so every image was used")
    else:
        usable = (
            np.ones(len(archive), dtype=bool) if config.views == "all" else groups == config.views
        )
        labels = np.where(groups == "", "unknown", groups)
        names, sizes = np.unique(labels[in_splits], return_counts=True)
        counts = {str(k): int(v) for k, v in zip(names, sizes, strict=True)}
    excluded = int((in_splits & ~usable).sum())
    patients, patient_column = patient_ids(archive)
    overlap: tuple[str, ...] = ()
    if patient_column is not None:
        query_patients = set(patients[usable & (splits == config.query_split)])
        key_patients = set(patients[usable & (splits == config.key_split)])
        overlap = tuple(sorted(query_patients & key_patients))
        if overlap and not config.allow_patient_overlap:
            examples = ", ".join(overlap[:5]) + (", ..." if len(overlap) > 5 else "")
            raise PatientOverlapError(
                f"{len(overlap)} patients have images in both the query split "
                f"{config.query_split!r} and the key split {config.key_split!r} (e.g. "
                f"{examples}): a query would retrieve its own patient's other images and the "
                "AUPRC would be inflated. Split by patient, choose other splits "
                "(--query-split / --key-split), or pass --allow-patient-overlap (the report "
                "then says so)"
            )
    return Cohort(
        usable=usable,
        views=config.views,
        view_column=column,
        view_counts=counts,
        excluded_by_view=excluded,
        patients=patients,
        patient_column=patient_column,
        overlap=overlap,
        overlap_allowed=config.allow_patient_overlap,
        notes=notes,
    )


def query_clusters(archive: LabelledArchive, query_index: np.ndarray, unit: str):
    """The bootstrap cluster of each query row: its patient (unit "patient") or None (images)."""
    if unit != "patient":
        return None
    patients, _ = patient_ids(archive)
    return patients[np.asarray(query_index, dtype=np.int64)]
