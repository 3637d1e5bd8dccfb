"""The write half of the store: one transaction per batch of images, embeddings, labels, outcomes.

Everything a batch writes lands in one transaction, so a killed process leaves either the whole
batch or none of it: never an image without its embedding, never half its labels. Whether a file's
image is new, already present or a conflict is decided inside that transaction (under SQLite's
write lock), so two ingests racing on the same archive cannot insert an image twice.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Connection, delete, insert, select, update

from chexretrieve.store.records import (
    BatchItem,
    ImageRecord,
    Outcome,
    SourceStamp,
    normalise_labels,
    vector_to_bytes,
)
from chexretrieve.store.schema import (
    ArchiveRevision,
    Embedding,
    Image,
    IngestOutcome,
    Label,
    SourceFile,
    Study,
)

#: rows per IN (...) query; far below SQLite's and PostgreSQL's parameter limits
CHUNK = 500


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def storable_text(text: str) -> str:
    """A path or message as valid UTF-8 (undecodable file-name bytes become \\x escapes)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def path_key(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()


def chunks(values: Sequence, size: int = CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def existing_images(conn: Connection, sop_uids: Iterable[str]) -> dict[str, tuple[int, str]]:
    """sop_uid -> (image id, pixel sha256) for those already stored."""
    found: dict[str, tuple[int, str]] = {}
    for part in chunks(sorted(set(sop_uids))):
        rows = conn.execute(
            select(Image.sop_uid, Image.id, Image.pixel_sha256).where(Image.sop_uid.in_(part))
        )
        for sop_uid, image_id, sha in rows:
            found[sop_uid] = (image_id, sha)
    return found


def images_with_embedding(conn: Connection, encoder_id: str, image_ids: Iterable[int]) -> set[int]:
    found: set[int] = set()
    for part in chunks(sorted(set(image_ids))):
        rows = conn.execute(
            select(Embedding.image_id).where(
                Embedding.encoder_id == encoder_id, Embedding.image_id.in_(part)
            )
        )
        found.update(row[0] for row in rows)
    return found


def bump_revision(conn: Connection) -> None:
    now = utc_now()
    changed = conn.execute(
        update(ArchiveRevision)
        .where(ArchiveRevision.id == 1)
        .values(revision=ArchiveRevision.revision + 1, updated_at=now)
    ).rowcount
    if not changed:
        conn.execute(insert(ArchiveRevision).values(id=1, revision=1, updated_at=now))


def _study_id(conn: Connection, record: ImageRecord, cache: dict[str, int]) -> int:
    if record.study_uid in cache:
        return cache[record.study_uid]
    row = conn.execute(select(Study.id).where(Study.study_uid == record.study_uid)).first()
    if row is None:
        result = conn.execute(
            insert(Study).values(
                study_uid=record.study_uid,
                patient_id=record.patient_id,
                study_date=record.study_date,
            )
        )
        study_id = int(result.inserted_primary_key[0])
    else:
        study_id = int(row[0])
    cache[record.study_uid] = study_id
    return study_id


def _insert_image(conn: Connection, record: ImageRecord, study_id: int, run_id: int | None) -> int:
    values = {
        name: getattr(record, name)
        for name in ImageRecord.__dataclass_fields__
        if name not in ("study_uid",)
    }
    if values["source_path"] is not None:
        values["source_path"] = storable_text(values["source_path"])
    result = conn.execute(
        insert(Image).values(study_id=study_id, run_id=run_id, ingested_at=utc_now(), **values)
    )
    return int(result.inserted_primary_key[0])


def insert_embedding(conn: Connection, encoder_id: str, dim: int, image_id: int, vector) -> None:  # noqa: ANN001
    conn.execute(
        insert(Embedding).values(
            encoder_id=encoder_id,
            image_id=image_id,
            dim=dim,
            vector=vector_to_bytes(vector, dim),
        )
    )


def replace_labels(
    conn: Connection, image_id: int, labels: Mapping[str, float | None] | None
) -> bool:
    """Make the image's labels for these findings equal ``labels``; True when anything changed."""
    if not labels:
        return False
    wanted = normalise_labels(labels)
    stored = {
        finding: value
        for finding, value in conn.execute(
            select(Label.finding, Label.value).where(Label.image_id == image_id)
        )
    }
    changed = [
        finding
        for finding, value in wanted.items()
        if finding not in stored or stored[finding] != value
    ]
    if not changed:
        return False
    conn.execute(delete(Label).where(Label.image_id == image_id, Label.finding.in_(changed)))
    conn.execute(
        insert(Label),
        [{"image_id": image_id, "finding": f, "value": wanted[f]} for f in changed],
    )
    return True


def remember_source(conn: Connection, stamp: SourceStamp | None, image_id: int) -> None:
    if stamp is None:
        return
    key = path_key(stamp.path)
    stored = conn.execute(
        select(SourceFile.size_bytes, SourceFile.mtime_ns, SourceFile.image_id).where(
            SourceFile.path_key == key
        )
    ).first()
    if stored is not None and tuple(stored) == (stamp.size_bytes, stamp.mtime_ns, image_id):
        return  # nothing changed: a re-run writes nothing here
    values = {
        "path": storable_text(stamp.path),
        "size_bytes": stamp.size_bytes,
        "mtime_ns": stamp.mtime_ns,
        "image_id": image_id,
        "seen_at": utc_now(),
    }
    if stored is None:
        conn.execute(insert(SourceFile).values(path_key=key, **values))
    else:
        conn.execute(update(SourceFile).where(SourceFile.path_key == key).values(**values))


def record_outcomes(conn: Connection, run_id: int, outcomes: Sequence[Outcome]) -> None:
    if not outcomes:
        return
    now = utc_now()
    conn.execute(
        insert(IngestOutcome),
        [
            {
                "run_id": run_id,
                "path": storable_text(o.path),
                "outcome": o.outcome,
                "reason": o.reason,
                "detail": storable_text(o.detail) if o.detail is not None else None,
                "sop_uid": o.sop_uid,
                "image_id": o.image_id,
                "recorded_at": now,
            }
            for o in outcomes
        ],
    )


def write_items(
    conn: Connection,
    *,
    run_id: int | None,
    encoder_id: str,
    dim: int,
    items: Sequence[BatchItem],
) -> list[Outcome]:
    """Classify and store a batch in the caller's transaction; one Outcome per item, in order."""
    records = [item.record for item in items if item.record is not None]
    existing = existing_images(conn, (r.sop_uid for r in records))
    known_ids = [image_id for image_id, _ in existing.values()]
    known_ids += [item.known_image_id for item in items if item.known_image_id is not None]
    embedded = images_with_embedding(conn, encoder_id, known_ids)
    studies: dict[str, int] = {}
    outcomes: list[Outcome] = []
    changed_archive = False

    for item in items:
        if item.known_image_id is not None:
            image_id = item.known_image_id
            if image_id not in embedded:
                raise ValueError(
                    f"{item.path}: image {image_id} has no embedding for {encoder_id}; an "
                    "unchanged-file shortcut is only valid for images already embedded"
                )
            labels_changed = replace_labels(conn, image_id, item.labels)
            changed_archive |= labels_changed
            remember_source(conn, item.stamp, image_id)
            detail = "file unchanged since it was stored (not decoded again)"
            outcomes.append(
                Outcome(
                    item.path,
                    "already-present",
                    detail=detail + ("; labels updated" if labels_changed else ""),
                    image_id=image_id,
                )
            )
            continue

        record = item.record
        if record is None:
            raise ValueError(f"{item.path}: a batch item needs a record or a known_image_id")
        if record.sop_uid in existing:
            image_id, stored_sha = existing[record.sop_uid]
            if stored_sha != record.pixel_sha256:
                outcomes.append(
                    Outcome(
                        item.path,
                        "conflict",
                        reason="same-uid-different-pixels",
                        detail=(
                            f"SOPInstanceUID {record.sop_uid} is already stored as image "
                            f"{image_id} with different pixels (stored sha256 {stored_sha[:12]}, "
                            f"this file {record.pixel_sha256[:12]}); the stored image is kept"
                        ),
                        sop_uid=record.sop_uid,
                        image_id=image_id,
                    )
                )
                continue
            notes = []
            if image_id in embedded:
                outcome = "already-present"
            elif item.embedding is not None:
                insert_embedding(conn, encoder_id, dim, image_id, item.embedding)
                embedded.add(image_id)
                outcome = "embedded"
                notes.append(f"image was stored; embedding for {encoder_id} added")
                changed_archive = True
            else:
                raise ValueError(
                    f"{item.path}: image {image_id} has no embedding for {encoder_id} and none "
                    "was supplied"
                )
            if replace_labels(conn, image_id, item.labels):
                notes.append("labels updated")
                changed_archive = True
            remember_source(conn, item.stamp, image_id)
            outcomes.append(
                Outcome(
                    item.path,
                    outcome,
                    detail="; ".join(notes) or None,
                    sop_uid=record.sop_uid,
                    image_id=image_id,
                )
            )
            continue

        if item.embedding is None:
            raise ValueError(f"{item.path}: a new image needs its embedding in the same batch")
        study_id = _study_id(conn, record, studies)
        image_id = _insert_image(conn, record, study_id, run_id)
        insert_embedding(conn, encoder_id, dim, image_id, item.embedding)
        existing[record.sop_uid] = (image_id, record.pixel_sha256)
        embedded.add(image_id)
        labelled = replace_labels(conn, image_id, item.labels)
        remember_source(conn, item.stamp, image_id)
        changed_archive = True
        outcomes.append(
            Outcome(
                item.path,
                "ingested",
                detail=f"labels for {len(item.labels)} findings" if labelled else None,
                sop_uid=record.sop_uid,
                image_id=image_id,
            )
        )
    if changed_archive:
        bump_revision(conn)
    return outcomes
