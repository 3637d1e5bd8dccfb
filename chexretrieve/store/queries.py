"""Query helpers of the store: metadata filters, frames, the integrity check."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from sqlalchemy import Connection, and_, exists, func, select

from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.store.records import ImageFilter
from chexretrieve.store.schema import AnchorEmbedding, Embedding, EncoderRow, Image, Label, Study

#: metadata columns of galleries and image frames, in order
IMAGE_COLUMNS = (
    "sop_uid",
    "study_uid",
    "series_uid",
    "patient_id",
    "patient_sex",
    "patient_age_years",
    "study_date",
    "view_position",
    "manufacturer",
    "body_part",
    "photometric",
    "modality",
    "pixel_rows",
    "pixel_columns",
    "pixel_spacing_row_mm",
    "pixel_spacing_col_mm",
    "transfer_syntax",
    "source_format",
    "pixel_sha256",
    "source_path",
    "split",
    "window_center",
    "window_width",
    "view_group",
    "dataset_path",
    "dataset_study_id",
)


def find_problems(conn: Connection) -> list[str]:
    """What is wrong with the store, as sentences (empty = healthy)."""
    problems: list[str] = []
    if conn.dialect.name == "sqlite":
        result = [r[0] for r in conn.exec_driver_sql("PRAGMA integrity_check").all()]
        if result != ["ok"]:
            problems += [f"sqlite integrity_check: {r}" for r in result]
        for row in conn.exec_driver_sql("PRAGMA foreign_key_check").all():
            problems.append(f"foreign key violation: {tuple(row)}")
    orphans = conn.execute(
        select(func.count())
        .select_from(Image)
        .where(~exists().where(Embedding.image_id == Image.id))
    ).scalar_one()
    if orphans:
        problems.append(f"{orphans} images have no embedding")
    wrong = conn.execute(
        select(func.count())
        .select_from(Embedding)
        .join(EncoderRow, EncoderRow.id == Embedding.encoder_id)
        .where(
            (Embedding.dim != EncoderRow.embed_dim)
            | (func.length(Embedding.vector) != 4 * Embedding.dim)
        )
    ).scalar_one()
    if wrong:
        problems.append(f"{wrong} embeddings do not match their encoder's dimension")
    dupes = conn.execute(
        select(Image.sop_uid).group_by(Image.sop_uid).having(func.count() > 1)
    ).all()
    if dupes:
        problems.append(f"{len(dupes)} SOP Instance UIDs stored more than once")
    unknown = conn.execute(
        select(Label.finding).distinct().where(Label.finding.not_in(list(FINDINGS)))
    ).all()
    if unknown:
        problems.append(f"labels for unknown findings: {[r[0] for r in unknown]}")
    return problems


def anchor_key(anchor_set_id: str, version: str, content_hash: str, encoder_id: str):  # noqa: ANN202
    return and_(
        AnchorEmbedding.anchor_set_id == anchor_set_id,
        AnchorEmbedding.version == version,
        AnchorEmbedding.content_hash == content_hash,
        AnchorEmbedding.encoder_id == encoder_id,
    )


def process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def apply_filters(stmt, filters: ImageFilter | None):  # noqa: ANN001, ANN202
    if filters is None:
        return stmt
    if filters.view_positions is not None:
        wanted = [v.upper() for v in filters.view_positions]
        stmt = stmt.where(func.upper(Image.view_position).in_(wanted))
    if filters.sexes is not None:
        wanted = [s.upper() for s in filters.sexes]
        stmt = stmt.where(func.upper(Image.patient_sex).in_(wanted))
    if filters.min_age_years is not None:
        stmt = stmt.where(Image.patient_age_years >= filters.min_age_years)
    if filters.max_age_years is not None:
        stmt = stmt.where(Image.patient_age_years <= filters.max_age_years)
    if filters.date_from is not None:
        stmt = stmt.where(Image.study_date >= filters.date_from)
    if filters.date_to is not None:
        stmt = stmt.where(Image.study_date <= filters.date_to)
    if filters.splits is not None:
        stmt = stmt.where(Image.split.in_(list(filters.splits)))
    if filters.labelled_for is not None:
        finding = canonical_finding(filters.labelled_for)
        stmt = stmt.where(
            exists().where(
                Label.image_id == Image.id, Label.finding == finding, Label.value.is_not(None)
            )
        )
    if filters.exclude_study_uids:
        stmt = stmt.where(Study.study_uid.not_in(list(filters.exclude_study_uids)))
    return stmt


def post_filter_mask(frame: pd.DataFrame, filters: ImageFilter | None) -> np.ndarray:
    if filters is None or filters.image_ids is None:
        return np.ones(len(frame), dtype=bool)
    return frame.index.isin([int(i) for i in filters.image_ids])


def post_filter(frame: pd.DataFrame, filters: ImageFilter | None) -> pd.DataFrame:
    return frame[post_filter_mask(frame, filters)]


def select_frame(conn: Connection, stmt) -> pd.DataFrame:  # noqa: ANN001 - a Select
    """The rows of ``stmt`` as a DataFrame with its selected columns (also when it has none)."""
    rows = conn.execute(stmt).all()
    return pd.DataFrame([r._asdict() for r in rows], columns=list(stmt.selected_columns.keys()))


def metadata_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(records, columns=["image_id", *IMAGE_COLUMNS])
    frame["image_id"] = frame["image_id"].astype(np.int64)
    frame["patient_age_years"] = pd.to_numeric(frame["patient_age_years"]).astype(float)
    return frame.set_index("image_id")
