"""Reads of the data-set columns (patient, study, view, sex, age, split, path); study reports,
read and written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from sqlalchemy import Connection, bindparam, distinct, func, insert, select, update

from chexretrieve.datasets.entries import view_group_of
from chexretrieve.findings import FINDINGS
from chexretrieve.store import writes
from chexretrieve.store.schema import Image, Label, Report, Study
from chexretrieve.store.writes import chunks

#: the data-set columns of ``Store.dataset_frame`` / ``Store.labels_frame(metadata=True)``
DATASET_COLUMNS = (
    "patient_id",
    "study_id",
    "view_group",
    "view_position",
    "sex",
    "age",
    "split",
    "dataset_path",
)

_SELECT = select(
    Image.id.label("image_id"),
    Image.patient_id,
    Image.dataset_study_id,
    Study.study_uid,
    Image.view_group,
    Image.view_position,
    Image.patient_sex,
    Image.patient_age_years,
    Image.split,
    Image.dataset_path,
    Image.source_path,
).join(Study, Study.id == Image.study_id)


def dataset_frame(conn: Connection, image_ids: Sequence[int] | None) -> pd.DataFrame:
    if image_ids is None:
        rows = conn.execute(_SELECT).all()
    else:
        rows = []
        for part in chunks(sorted({int(i) for i in image_ids})):
            rows += conn.execute(_SELECT.where(Image.id.in_(part))).all()
    out = [
        {
            "image_id": int(r.image_id),
            "patient_id": r.patient_id or "",
            "study_id": r.dataset_study_id or r.study_uid or "",
            "view_group": r.view_group or view_group_of(r.view_position) or "",
            "view_position": (r.view_position or "").upper(),
            "sex": r.patient_sex or "",
            "age": np.nan if r.patient_age_years is None else float(r.patient_age_years),
            "split": r.split or "",
            "dataset_path": r.dataset_path or r.source_path or "",
        }
        for r in rows
    ]
    frame = pd.DataFrame(out, columns=["image_id", *DATASET_COLUMNS])
    frame["image_id"] = frame["image_id"].astype(np.int64)
    frame["age"] = pd.to_numeric(frame["age"]).astype(float)
    return frame.set_index("image_id").sort_index()


def report_for_image(conn: Connection, image_id: int) -> str | None:
    row = conn.execute(
        select(Image.dataset_study_id, Study.study_uid)
        .join(Study, Study.id == Image.study_id)
        .where(Image.id == image_id)
    ).first()
    if row is None:
        return None
    keys = [k for k in (row.dataset_study_id, row.study_uid) if k]
    if not keys:
        return None
    found = dict(
        conn.execute(select(Report.study_key, Report.text).where(Report.study_key.in_(keys))).all()
    )
    return next((found[k] for k in keys if k in found), None)


def reports_for_images(conn: Connection, image_ids: Sequence[int]) -> dict[int, str | None]:
    """``report_for_image`` of every id (None for an unknown id), in two queries per chunk of
    ids rather than two per image (a page of results asks for a dozen at once)."""
    ids = sorted({int(i) for i in image_ids})
    keys_of: dict[int, list[str]] = {}
    for part in chunks(ids):
        rows = conn.execute(
            select(Image.id, Image.dataset_study_id, Study.study_uid)
            .join(Study, Study.id == Image.study_id)
            .where(Image.id.in_(part))
        )
        for image_id, dataset_study_id, study_uid in rows:
            keys_of[int(image_id)] = [k for k in (dataset_study_id, study_uid) if k]
    wanted = sorted({k for keys in keys_of.values() for k in keys})
    found: dict[str, str] = {}
    for part in chunks(wanted):
        stmt = select(Report.study_key, Report.text).where(Report.study_key.in_(part))
        found.update(conn.execute(stmt).all())
    return {i: next((found[k] for k in keys_of.get(i, ()) if k in found), None) for i in ids}


def report_texts(conn: Connection) -> list[tuple[str, str]]:
    rows = conn.execute(select(Report.study_key, Report.text).order_by(Report.study_key))
    return [(key, text) for key, text in rows]


def archive_identifiers(conn: Connection) -> dict[str, object]:
    """What the archive holds that identifies its patients: ``ids`` (patient ids, accession
    numbers, data-set study ids), ``dates`` (study dates) and ``dicom_files`` (one stored DICOM
    source path per study, whose header names people)."""
    ids: set[str] = set()
    dates: set = set()
    files: dict[int, str] = {}
    rows = conn.execute(
        select(
            Image.study_id, Image.patient_id, Image.accession_number, Image.dataset_study_id,
            Image.study_date, Image.source_path, Image.source_format, Study.patient_id,
            Study.study_date,
        ).join(Study, Study.id == Image.study_id)
    )  # fmt: skip
    for study, patient, accession, dataset_study, date, path, kind, patient2, date2 in rows:
        ids.update(v for v in (patient, accession, dataset_study, patient2) if v)
        dates.update(d for d in (date, date2) if d)
        if path and kind == "dicom":
            files.setdefault(study, path)
    return {"ids": ids, "dates": dates, "dicom_files": sorted(files.values())}


def report_keys(conn: Connection) -> dict[str, str]:
    rows = conn.execute(
        select(Image.dataset_study_id, Study.study_uid, Image.dataset_path, Image.source_path).join(
            Study, Study.id == Image.study_id
        )
    )
    out: dict[str, str] = {}
    for dataset_study, study_uid, dataset_path, source_path in rows:
        key = dataset_study or study_uid
        # the data-set path also without its release folder: CheXpert Plus names
        # "train/patient1/study1/view1_frontal.jpg" what CheXpert lists under CheXpert-v1.0/
        inner = dataset_path.split("/", 1)[1] if dataset_path and "/" in dataset_path else None
        for name in (dataset_study, study_uid, dataset_path, source_path, inner):
            if name:
                out.setdefault(name, key)
    return out


def patients_in_several_splits(conn: Connection, examples: int) -> tuple[int, tuple]:
    known = (Image.patient_id.is_not(None), Image.patient_id != "", Image.split.is_not(None),
             Image.split != "")  # fmt: skip
    several = (
        select(Image.patient_id)
        .where(*known)
        .group_by(Image.patient_id)
        .having(func.count(distinct(Image.split)) > 1)
    )
    count = int(conn.execute(select(func.count()).select_from(several.subquery())).scalar_one())
    found = []
    for (patient,) in conn.execute(several.order_by(Image.patient_id).limit(examples)):
        rows = conn.execute(
            select(Image.split).distinct().where(Image.patient_id == patient, *known[2:])
        )
        found.append((patient, tuple(sorted(r[0] for r in rows))))
    return count, tuple(found)


def put_reports(conn: Connection, reports: Mapping[str, tuple[str, str | None]]) -> Counter:
    """Store reports (study key -> (text, source)); counts "new", "changed", "unchanged"."""
    counts: Counter = Counter()
    if not reports:
        return counts
    stored: dict[str, str] = {}
    for part in chunks(sorted(reports)):
        rows = conn.execute(select(Report.study_key, Report.text).where(Report.study_key.in_(part)))
        stored.update({key: text for key, text in rows})
    now = writes.utc_now()
    inserts, updates = [], []
    for key, (text, source) in reports.items():
        if not key or len(key) > 64:
            raise ValueError(f"report study key {key!r} must be 1 to 64 characters")
        row = {"text": writes.storable_text(text), "source": source, "updated_at": now}
        if key not in stored:
            inserts.append({"study_key": key, **row})
            counts["new"] += 1
        elif stored[key] != row["text"]:
            updates.append({"key": key, **row})
            counts["changed"] += 1
        else:
            counts["unchanged"] += 1
    if inserts:
        conn.execute(insert(Report), inserts)
    if updates:
        conn.execute(
            update(Report)
            .where(Report.study_key == bindparam("key"))
            .values(
                text=bindparam("text"),
                source=bindparam("source"),
                updated_at=bindparam("updated_at"),
            ),
            updates,
        )
    return counts


class DatasetRecords:
    """The Store's data-set and report methods (a mixin: it uses ``Store._read`` / ``_write``)."""

    def dataset_frame(
        self, image_ids: Sequence[int] | None = None, *, labels: bool = True
    ) -> pd.DataFrame:
        """EVERY image (labelled or not), index image_id: the finding columns (NaN when blank or
        unlabelled; left out with ``labels=False``) then ``DATASET_COLUMNS``:
        patient_id, study_id (the data set's study id, else the StudyInstanceUID), view_group
        ("frontal" / "lateral" / "" unknown; from the data set, else from ViewPosition),
        view_position, sex, age (years, NaN unknown), split ("" none), dataset_path (the path
        relative to the data-set root, else the file path). Strings are "" when unknown."""
        with self._read() as conn:
            frame = dataset_frame(conn, image_ids)
        if labels:
            frame = self._labels_table(frame.index.tolist()).reindex(frame.index).join(frame)
        return frame

    def patients_in_several_splits(self, examples: int = 3) -> tuple[int, tuple]:
        """(how many patients have images in more than one split, up to ``examples`` of them as
        (patient id, its splits sorted)); patients and splits as the data sets give them."""
        with self._read() as conn:
            return patients_in_several_splits(conn, examples)

    # ------------------------------------------------------------------ reports
    def put_reports(self, reports: Mapping[str, tuple[str, str | None]]) -> dict[str, int]:
        """Store study reports (study key -> (text, source)) in one transaction; how many were
        "new", "changed" and "unchanged". The key is the data set's study id (MIMIC study_id,
        CheXpert patient/study), else the StudyInstanceUID."""
        with self._write() as conn:
            counts = put_reports(conn, reports)
            if counts["new"] or counts["changed"]:
                writes.bump_revision(conn)
        return {name: counts.get(name, 0) for name in ("new", "changed", "unchanged")}

    def report_for_image(self, image_id: int) -> str | None:
        """The stored report of the image's study, or None."""
        with self._read() as conn:
            return report_for_image(conn, int(image_id))

    def reports_for_images(self, image_ids: Sequence[int]) -> dict[int, str | None]:
        """The stored report of each image's study (None where there is none), at once."""
        with self._read() as conn:
            return reports_for_images(conn, image_ids)

    def report_texts(self) -> list[tuple[str, str]]:
        """Every stored report as (study key, text), ordered by key."""
        with self._read() as conn:
            return report_texts(conn)

    def archive_identifiers(self) -> dict[str, object]:
        """Patient ids, accession numbers, study ids and dates, and a DICOM file per study (see
        :func:`archive_identifiers`): what ``anchors import-reports`` removes exactly."""
        with self._read() as conn:
            return archive_identifiers(conn)

    def report_keys(self) -> dict[str, str]:
        """Image names (data-set path, file path) and study ids -> the study key reports use."""
        with self._read() as conn:
            return report_keys(conn)

    def _labels_table(self, image_ids: Sequence[int] | None) -> pd.DataFrame:
        """Finding columns (FINDINGS order) of labelled images, index image_id."""
        stmt = select(Label.image_id, Label.finding, Label.value)
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        frame = pd.DataFrame(rows, columns=["image_id", "finding", "value"])
        frame["value"] = pd.to_numeric(frame["value"], errors="coerce").astype(float)
        table = frame.pivot(index="image_id", columns="finding", values="value")
        table = table.reindex(columns=list(FINDINGS)).astype(float)
        table.columns.name = None
        if image_ids is not None:
            table = table[table.index.isin([int(i) for i in image_ids])]
        return table.sort_index()
