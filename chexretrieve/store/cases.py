"""Read helpers of the store for the case lookup: the case picker and stored thumbnails.

``find_cases`` pages through the archived images by case id / accession prefix and by one
finding's label status, with the total count (any number of pages, never only the first 500).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, and_, exists, func, or_, select

from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.store.records import CasePage, CaseRow
from chexretrieve.store.schema import Embedding, Image, Label
from chexretrieve.store.schema import Thumbnail as ThumbnailRow
from chexretrieve.store.writes import chunks

#: label statuses the case picker filters by: stored value, or how the label is absent
LABEL_STATUSES = ("positive", "negative", "uncertain", "blank", "unlabelled")
_STATUS_VALUE = {"positive": 1.0, "negative": 0.0, "uncertain": -1.0}
#: most cases one page may hold
MAX_PAGE = 1000


def _status_condition(finding: str, status: str):  # noqa: ANN202
    """SQL condition on Image for one finding's label status.

    positive / negative / uncertain: the finding's label is 1 / 0 / -1; blank: the image has labels
    but this finding's is blank (not mentioned, or no row for it); unlabelled: no labels at all.
    """
    any_label = exists().where(Label.image_id == Image.id)
    if status in _STATUS_VALUE:
        return exists().where(
            Label.image_id == Image.id,
            Label.finding == finding,
            Label.value == _STATUS_VALUE[status],
        )
    known = exists().where(
        Label.image_id == Image.id, Label.finding == finding, Label.value.is_not(None)
    )
    if status == "blank":
        return and_(any_label, ~known)
    return ~any_label


def _text_condition(text: str):  # noqa: ANN202
    """Case id equal to ``text`` (when it is digits) or accession number equal to it
    (case-insensitive). Exact only: a prefix search would reveal accession numbers one character
    at a time (issue 23, finding 6); no LIKE pattern is ever built from user text."""
    accession = func.upper(Image.accession_number) == text.upper()
    if text.isdigit() and len(text.lstrip("0")) <= 18:
        return or_(Image.id == int(text), accession)
    return accession


def check_case_query(
    finding: str | None, status: str | None, offset: int, limit: int
) -> str | None:
    """The canonical finding; ValueError with the reason for a bad combination or page."""
    if status is not None and status not in LABEL_STATUSES:
        raise ValueError(f"label status must be one of {', '.join(LABEL_STATUSES)}, not {status!r}")
    if status is not None and finding is None:
        raise ValueError(f"filtering by label status {status!r} needs a finding")
    if int(offset) < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    if not 1 <= int(limit) <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
    return canonical_finding(finding) if finding is not None else None


def find_cases(
    conn: Connection,
    text: str | None = None,
    finding: str | None = None,
    status: str | None = None,
    encoder_id: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> CasePage:
    """One page of cases in image-id order with the total that match (see ``Store.find_cases``)."""
    finding = check_case_query(finding, status, offset, limit)
    conditions = []
    text = (text or "").strip()
    if text:
        conditions.append(_text_condition(text))
    if finding is not None and status is not None:
        conditions.append(_status_condition(finding, status))
    if encoder_id is not None:
        conditions.append(
            exists().where(Embedding.image_id == Image.id, Embedding.encoder_id == encoder_id)
        )
    total = conn.execute(select(func.count()).select_from(Image).where(*conditions)).scalar_one()
    stmt = (
        select(
            Image.id,
            Image.accession_number,
            Image.view_position,
            Image.patient_sex,
            Image.patient_age_years,
            Image.study_date,
        )
        .where(*conditions)
        .order_by(Image.id)
        .offset(int(offset))
        .limit(int(limit))
    )
    rows = conn.execute(stmt).all()
    ids = [int(r.id) for r in rows]
    labels = labels_of(conn, ids)
    thumbs = images_with_thumbnail(conn, ids)
    cases = tuple(
        CaseRow(
            image_id=int(r.id),
            accession_number=r.accession_number,
            view_position=r.view_position,
            patient_sex=r.patient_sex,
            patient_age_years=r.patient_age_years,
            study_date=r.study_date,
            labels=labels.get(int(r.id), {}),
            has_thumbnail=int(r.id) in thumbs,
        )
        for r in rows
    )
    return CasePage(total=int(total), offset=int(offset), limit=int(limit), cases=cases)


def labels_of(conn: Connection, image_ids: Sequence[int]) -> dict[int, dict[str, float | None]]:
    """image id -> {finding: value} over every finding (None = blank) for labelled images."""
    found: dict[int, dict[str, float | None]] = {}
    for part in chunks(sorted(set(image_ids))):
        rows = conn.execute(
            select(Label.image_id, Label.finding, Label.value).where(Label.image_id.in_(part))
        )
        for image_id, finding, value in rows:
            found.setdefault(int(image_id), dict.fromkeys(FINDINGS))[finding] = (
                None if value is None else float(value)
            )
    return found


def images_with_thumbnail(conn: Connection, image_ids: Sequence[int]) -> set[int]:
    found: set[int] = set()
    for part in chunks(sorted(set(image_ids))):
        rows = conn.execute(select(ThumbnailRow.image_id).where(ThumbnailRow.image_id.in_(part)))
        found.update(int(r[0]) for r in rows)
    return found


def read_thumbnails(conn: Connection, image_ids: Sequence[int]) -> dict[int, bytes]:
    """image id -> PNG bytes of those that have a thumbnail."""
    found: dict[int, bytes] = {}
    for part in chunks(sorted({int(i) for i in image_ids})):
        rows = conn.execute(
            select(ThumbnailRow.image_id, ThumbnailRow.png).where(ThumbnailRow.image_id.in_(part))
        )
        found.update({int(i): bytes(png) for i, png in rows})
    return found


def images_needing_thumbnail(
    conn: Connection, max_side: int | None = None, limit: int | None = None
) -> list[tuple[int, str | None]]:
    """(image id, source path) of images without a thumbnail (with ``max_side``: also those whose
    thumbnail was made for another size), in image-id order."""
    missing = ~exists().where(ThumbnailRow.image_id == Image.id)
    if max_side is not None:
        missing = or_(
            missing,
            exists().where(ThumbnailRow.image_id == Image.id, ThumbnailRow.max_side != max_side),
        )
    stmt = select(Image.id, Image.source_path).where(missing).order_by(Image.id)
    if limit is not None:
        stmt = stmt.limit(int(limit))
    return [(int(i), path) for i, path in conn.execute(stmt).all()]
