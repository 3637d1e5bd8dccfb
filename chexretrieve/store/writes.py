"""The write half of the store: one transaction per batch of images, embeddings, labels, outcomes.

Everything a batch writes lands in one transaction, so a killed process leaves either the whole
batch or none of it: never an image without its embedding, never half its labels. Whether a file's
image is new, already present or a conflict is decided inside that transaction (under SQLite's
write lock), so two ingests racing on the same archive cannot insert an image twice.

A batch costs a fixed number of statements whatever its size: a few bulk reads to classify the
items, then one multi-row statement per table (rows of new images come back with their ids).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from chexretrieve.store.copies import find_copies
from chexretrieve.store.records import (
    BatchItem,
    ImageRecord,
    Outcome,
    SourceStamp,
    Thumbnail,
    normalise_labels,
    vector_to_bytes,
)
from chexretrieve.store.schema import (
    ArchiveChange,
    ArchiveRevision,
    Embedding,
    Image,
    IngestOutcome,
    Label,
    SourceFile,
    Study,
)
from chexretrieve.store.schema import Thumbnail as ThumbnailRow

#: rows per IN (...) query; far below SQLite's and PostgreSQL's parameter limits
CHUNK = 500
_IMAGE_FIELDS = tuple(name for name in ImageRecord.__dataclass_fields__ if name != "study_uid")
#: image columns an annotation (``BatchItem.annotation``) may set on a stored image
ANNOTATION_FIELDS = (
    "split",
    "patient_id",
    "patient_sex",
    "patient_age_years",
    "study_date",
    "view_position",
    "view_group",
    "dataset_path",
    "dataset_study_id",
    "study_uid",
)


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


def bump_revision(conn: Connection, image_ids: Iterable[int] = ()) -> int:
    """Advance the archive revision and log which images this write changed (``image_ids``;
    none: one row without an image, e.g. a report), in the caller's transaction; the new
    revision. The archive index (``chexretrieve.index``) updates itself from that log."""
    now = utc_now()
    changed = conn.execute(
        update(ArchiveRevision)
        .where(ArchiveRevision.id == 1)
        .values(revision=ArchiveRevision.revision + 1, updated_at=now)
    ).rowcount
    if not changed:
        conn.execute(insert(ArchiveRevision).values(id=1, revision=1, updated_at=now))
    revision = int(conn.execute(select(ArchiveRevision.revision)).scalar_one())
    ids = sorted({int(i) for i in image_ids})
    conn.execute(
        insert(ArchiveChange),
        [{"revision": revision, "image_id": i} for i in ids] or [{"revision": revision}],
    )
    return revision


def replace_labels(
    conn: Connection, image_id: int, labels: Mapping[str, float | None] | None
) -> bool:
    """Make the image's labels for these findings equal ``labels``; True when anything changed."""
    return bool(_write_labels(conn, {image_id: labels} if labels else {}))


def _write_labels(conn: Connection, wanted: Mapping[int, Mapping[str, float | None]]) -> set[int]:
    """Bring the labels of several images to ``wanted`` (only the findings given); the image ids
    whose labels changed."""
    targets = {i: normalise_labels(labels) for i, labels in wanted.items() if labels}
    if not targets:
        return set()
    stored: dict[int, dict[str, float | None]] = {}
    for part in chunks(sorted(targets)):
        rows = conn.execute(
            select(Label.image_id, Label.finding, Label.value).where(Label.image_id.in_(part))
        )
        for image_id, finding, value in rows:
            stored.setdefault(image_id, {})[finding] = value
    changes = [
        (image_id, finding, value)
        for image_id, labels in targets.items()
        for finding, value in labels.items()
        if finding not in stored.get(image_id, {}) or stored[image_id][finding] != value
    ]
    if not changes:
        return set()
    replaced = [
        {"old_image": image_id, "old_finding": finding}
        for image_id, finding, _ in changes
        if finding in stored.get(image_id, {})
    ]
    if replaced:
        conn.execute(
            delete(Label).where(
                Label.image_id == bindparam("old_image"), Label.finding == bindparam("old_finding")
            ),
            replaced,
        )
    conn.execute(
        insert(Label),
        [{"image_id": i, "finding": f, "value": v} for i, f, v in changes],
    )
    return {image_id for image_id, _, _ in changes}


def _remember_sources(conn: Connection, stamps: Mapping[str, tuple[SourceStamp, int]]) -> None:
    """Record (path -> size, mtime, image) for files now stored; unchanged rows are not touched."""
    if not stamps:
        return
    stored: dict[str, tuple[int, int, int]] = {}
    for part in chunks(sorted(stamps)):
        rows = conn.execute(
            select(
                SourceFile.path_key, SourceFile.size_bytes, SourceFile.mtime_ns, SourceFile.image_id
            ).where(SourceFile.path_key.in_(part))
        )
        for key, size, mtime, image_id in rows:
            stored[key] = (size, mtime, image_id)
    now = utc_now()
    inserts, updates = [], []
    for key, (stamp, image_id) in stamps.items():
        values = (stamp.size_bytes, stamp.mtime_ns, image_id)
        if stored.get(key) == values:
            continue
        row = {
            "path": storable_text(stamp.path),
            "size_bytes": stamp.size_bytes,
            "mtime_ns": stamp.mtime_ns,
            "image_id": image_id,
            "seen_at": now,
        }
        if key in stored:
            updates.append({"key": key, **row})
        else:
            inserts.append({"path_key": key, **row})
    if inserts:
        conn.execute(insert(SourceFile), inserts)
    if updates:
        conn.execute(
            update(SourceFile)
            .where(SourceFile.path_key == bindparam("key"))
            .values(
                path=bindparam("path"),
                size_bytes=bindparam("size_bytes"),
                mtime_ns=bindparam("mtime_ns"),
                image_id=bindparam("image_id"),
                seen_at=bindparam("seen_at"),
            ),
            updates,
        )


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(png: bytes) -> tuple[int, int]:
    """(rows, columns) from a PNG's header; ValueError when the bytes are not a PNG."""
    if len(png) < 24 or png[:8] != _PNG_SIGNATURE or png[12:16] != b"IHDR":
        raise ValueError("a thumbnail must be PNG bytes (chexretrieve.dicom.thumbnail_png)")
    columns, rows = struct.unpack(">II", png[16:24])
    return int(rows), int(columns)


def thumbnail_row(image_id: int, thumbnail: Thumbnail, now: dt.datetime) -> dict:
    if thumbnail.max_side < 1:
        raise ValueError(f"thumbnail max_side must be at least 1, got {thumbnail.max_side}")
    rows, columns = png_size(thumbnail.png)
    return {
        "image_id": int(image_id),
        "max_side": int(thumbnail.max_side),
        "pixel_rows": rows,
        "pixel_columns": columns,
        "png": bytes(thumbnail.png),
        "created_at": now,
    }


def add_thumbnails(conn: Connection, wanted: Mapping[int, Thumbnail], replace: bool = False) -> int:
    """Store thumbnails of images that have none (``replace``: also overwrite); how many written."""
    if not wanted:
        return 0
    stored: set[int] = set()
    for part in chunks(sorted(wanted)):
        rows = conn.execute(select(ThumbnailRow.image_id).where(ThumbnailRow.image_id.in_(part)))
        stored.update(int(r[0]) for r in rows)
    if replace and stored:
        for part in chunks(sorted(stored)):
            conn.execute(delete(ThumbnailRow).where(ThumbnailRow.image_id.in_(part)))
        stored = set()
    now = utc_now()
    rows = [thumbnail_row(i, t, now) for i, t in wanted.items() if i not in stored]
    if rows:
        conn.execute(insert(ThumbnailRow), rows)
    return len(rows)


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


@dataclass
class _Plan:
    """What a batch will do, decided before any write."""

    outcomes: list[Outcome | None]  # decided outcomes (conflicts); None = stored, see below
    new: dict[str, int] = field(default_factory=dict)  # sop_uid -> position of its first item
    new_sha: dict[str, str] = field(default_factory=dict)  # sop_uid -> pixel sha256 of that item
    embed: dict[int, int] = field(default_factory=dict)  # position -> stored image id to embed
    # position -> image id of every stored item; -(p + 1) stands for "the new image of item p"
    image_of: dict[int, int] = field(default_factory=dict)
    notes: dict[int, list[str]] = field(default_factory=dict)


def _conflict(item: BatchItem, image_id: int | None, stored_sha: str) -> Outcome:
    record = item.record
    where = f"image {image_id}" if image_id is not None else "an earlier file of this batch"
    return Outcome(
        item.path,
        "conflict",
        reason="same-uid-different-pixels",
        detail=(
            f"SOPInstanceUID {record.sop_uid} is already stored as {where} with different "
            f"pixels (stored sha256 {stored_sha[:12]}, this file {record.pixel_sha256[:12]}); "
            "the stored image is kept"
        ),
        sop_uid=record.sop_uid,
        image_id=image_id,
    )


def write_items(
    conn: Connection,
    *,
    run_id: int | None,
    encoder_id: str,
    dim: int,
    items: Sequence[BatchItem],
    changes: Counter | None = None,
) -> list[Outcome]:
    """Classify and store a batch in the caller's transaction; one Outcome per item, in order.

    ``changes`` (when given) counts, over images that were already stored: "labels" (labels
    changed), "splits" (split changed), "metadata" (other annotated columns changed) and
    "unchanged" (none of these).
    """
    existing = existing_images(conn, (i.record.sop_uid for i in items if i.record is not None))
    known = [image_id for image_id, _ in existing.values()]
    known += [i.known_image_id for i in items if i.known_image_id is not None]
    embedded = images_with_embedding(conn, encoder_id, known)
    plan = _Plan(outcomes=[None] * len(items))
    for position, item in enumerate(items):
        _classify(plan, position, item, existing, embedded, encoder_id)

    new_ids = _insert_new_images(conn, items, plan, run_id)
    image_of = plan.image_of  # resolved to real ids now
    to_embed = [*plan.embed.items(), *new_ids.items()]
    if to_embed:
        conn.execute(
            insert(Embedding),
            [
                {
                    "encoder_id": encoder_id,
                    "image_id": image_id,
                    "dim": dim,
                    "vector": vector_to_bytes(items[position].embedding, dim),
                }
                for position, image_id in to_embed
            ],
        )
    first_of = {image_id: position for position, image_id in new_ids.items()}
    copies = find_copies(conn, items, image_of, first_of)
    originals = {p: i for p, i in image_of.items() if p not in copies}
    label_changes = _write_labels(conn, {i: items[p].labels for p, i in originals.items()})
    stored_before = {p: i for p, i in originals.items() if i not in first_of}
    split_changes, meta_changes = write_annotations(
        conn, {i: items[p].annotation for p, i in stored_before.items() if items[p].annotation}
    )
    if changes is not None:
        changes.update(["copies"] * len(copies))
        changes.update(["copies in another split"] * sum(c.other_split for c in copies.values()))
        for image_id in set(stored_before.values()):
            kinds = [
                name
                for name, found in (
                    ("labels", label_changes),
                    ("splits", split_changes),
                    ("metadata", meta_changes),
                )
                if image_id in found
            ]
            changes.update(kinds or ["unchanged"])
    add_thumbnails(
        conn, {image_of[p]: items[p].thumbnail for p in image_of if items[p].thumbnail is not None}
    )
    _remember_sources(
        conn,
        {
            path_key(items[p].stamp.path): (items[p].stamp, image_of[p])
            for p in image_of
            if items[p].stamp is not None
        },
    )
    updated = {"split updated": split_changes, "metadata updated": meta_changes}
    for position, copy in copies.items():
        record = items[position].record
        sop_uid = record.sop_uid if record is not None else None
        plan.outcomes[position] = Outcome(
            items[position].path, "already-present", None, copy.note(), sop_uid, copy.image_id
        )
    outcomes = [
        plan.outcomes[p] or _stored_outcome(p, item, plan, new_ids, label_changes, updated)
        for p, item in enumerate(items)
    ]
    changed = {*new_ids.values(), *plan.embed.values(), *label_changes, *split_changes,
               *meta_changes}  # fmt: skip
    if changed:
        bump_revision(conn, changed)
    return outcomes


def _stored_outcome(position, item, plan, new_ids, label_changes, updated) -> Outcome:  # noqa: ANN001
    image_id = plan.image_of[position]
    sop_uid = item.record.sop_uid if item.record is not None else None
    if position in new_ids:
        labelled = bool(item.labels) and image_id in label_changes
        detail = f"labels for {len(item.labels)} findings" if labelled else None
        return Outcome(item.path, "ingested", None, detail, sop_uid, image_id)
    notes = list(plan.notes.get(position, []))
    if image_id in label_changes:
        notes.append("labels updated")
    notes += [note for note, ids in updated.items() if image_id in ids]
    kind = "embedded" if position in plan.embed else "already-present"
    return Outcome(item.path, kind, None, "; ".join(notes) or None, sop_uid, image_id)


def _classify(plan, position, item, existing, embedded, encoder_id) -> None:  # noqa: ANN001
    """Decide what one item will do; conflicts get their outcome now."""
    if item.known_image_id is not None:
        if item.known_image_id not in embedded:
            raise ValueError(
                f"{item.path}: image {item.known_image_id} has no embedding for {encoder_id}; an "
                "unchanged-file shortcut is only valid for images already embedded"
            )
        plan.image_of[position] = item.known_image_id
        plan.notes[position] = ["file unchanged since it was stored (not decoded again)"]
        return
    record = item.record
    if record is None:
        raise ValueError(f"{item.path}: a batch item needs a record or a known_image_id")
    if record.sop_uid in existing:
        image_id, stored_sha = existing[record.sop_uid]
        if stored_sha != record.pixel_sha256:
            plan.outcomes[position] = _conflict(item, image_id, stored_sha)
            return
        if image_id not in embedded:
            if item.embedding is None:
                raise ValueError(
                    f"{item.path}: image {image_id} has no embedding for {encoder_id} and none "
                    "was supplied"
                )
            plan.embed[position] = image_id
            plan.notes[position] = [f"image was stored; embedding for {encoder_id} added"]
            embedded.add(image_id)
        plan.image_of[position] = image_id
        return
    if record.sop_uid in plan.new:  # a second copy within this batch
        first_sha = plan.new_sha[record.sop_uid]
        if first_sha != record.pixel_sha256:
            plan.outcomes[position] = _conflict(item, None, first_sha)
            return
        plan.image_of[position] = -plan.new[record.sop_uid] - 1
        return
    if item.embedding is None:
        raise ValueError(f"{item.path}: a new image needs its embedding in the same batch")
    plan.new[record.sop_uid] = position
    plan.new_sha[record.sop_uid] = record.pixel_sha256
    plan.image_of[position] = -position - 1


def _insert_new_images(conn: Connection, items, plan: _Plan, run_id) -> dict[int, int]:  # noqa: ANN001
    """Insert studies and images of the batch's new SOP UIDs; position -> new image id (also for
    later copies of the same UID in the batch)."""
    if not plan.new:
        return _resolve_copies(plan, {})
    records = {position: items[position].record for position in plan.new.values()}
    study_ids = _study_ids(conn, list(records.values()))
    now = utc_now()
    rows = []
    for record in records.values():
        values = {name: getattr(record, name) for name in _IMAGE_FIELDS}
        if values["source_path"] is not None:
            values["source_path"] = storable_text(values["source_path"])
        values.update(study_id=study_ids[record.study_uid], run_id=run_id, ingested_at=now)
        rows.append(values)
    inserted = conn.execute(
        insert(Image).returning(Image.id, Image.sop_uid, sort_by_parameter_order=True), rows
    ).all()
    by_sop = {sop: int(image_id) for image_id, sop in inserted}
    ids = {position: by_sop[record.sop_uid] for position, record in records.items()}
    return _resolve_copies(plan, ids)


def _resolve_copies(plan: _Plan, ids: dict[int, int]) -> dict[int, int]:
    for position, image_id in list(plan.image_of.items()):
        if image_id < 0:
            plan.image_of[position] = ids[-image_id - 1]
    return ids


def _study_ids(conn: Connection, records: list[ImageRecord]) -> dict[str, int]:
    wanted: dict[str, ImageRecord] = {}
    for record in records:
        wanted.setdefault(record.study_uid, record)
    found: dict[str, int] = {}
    for part in chunks(sorted(wanted)):
        rows = conn.execute(select(Study.study_uid, Study.id).where(Study.study_uid.in_(part)))
        found.update({uid: int(i) for uid, i in rows})
    missing = [
        {"study_uid": uid, "patient_id": r.patient_id, "study_date": r.study_date}
        for uid, r in wanted.items()
        if uid not in found
    ]
    if missing:
        inserted = conn.execute(
            insert(Study).returning(Study.id, Study.study_uid, sort_by_parameter_order=True),
            missing,
        ).all()
        found.update({uid: int(i) for i, uid in inserted})
    return found


def write_annotations(
    conn: Connection, wanted: Mapping[int, Mapping[str, object]]
) -> tuple[set[int], set[int]]:
    """Set annotated columns (``ANNOTATION_FIELDS``) of stored images where they differ; a
    ``study_uid`` moves the image to that study (made when new). (ids whose split changed, ids
    whose other columns changed)."""
    targets = {int(i): dict(v) for i, v in wanted.items() if v}
    for values in targets.values():
        unknown = set(values) - set(ANNOTATION_FIELDS)
        if unknown:
            raise ValueError(f"annotation sets unknown image columns {sorted(unknown)}")
    if not targets:
        return set(), set()
    columns = [getattr(Image, n) for n in ANNOTATION_FIELDS if n != "study_uid"]
    stored: dict[int, dict[str, object]] = {}
    for part in chunks(sorted(targets)):
        rows = conn.execute(
            select(Image.id, Study.study_uid, *columns)
            .join(Study, Study.id == Image.study_id)
            .where(Image.id.in_(part))
        )
        for row in rows:
            stored[int(row.id)] = row._asdict()
    split_changed: set[int] = set()
    other_changed: set[int] = set()
    updates: dict[int, dict[str, object]] = {}
    for image_id, values in targets.items():
        before = stored.get(image_id)
        if before is None:
            continue
        diff = {n: v for n, v in values.items() if before.get(n) != v}
        if not diff:
            continue
        updates[image_id] = diff
        if "split" in diff:
            split_changed.add(image_id)
        if set(diff) - {"split"}:
            other_changed.add(image_id)
    moved = {i: d.pop("study_uid") for i, d in updates.items() if "study_uid" in d}
    if moved:
        studies = _study_ids_for(conn, moved, targets)
        for image_id, uid in moved.items():
            updates[image_id]["study_id"] = studies[uid]
    for image_id, diff in updates.items():
        if diff:
            conn.execute(update(Image).where(Image.id == image_id).values(**diff))
    return split_changed, other_changed


def _study_ids_for(conn: Connection, moved: Mapping[int, str], targets) -> dict[str, int]:  # noqa: ANN001
    records = [
        ImageRecord(
            sop_uid="",
            study_uid=uid,
            pixel_sha256="",
            patient_id=targets[image_id].get("patient_id"),
            study_date=targets[image_id].get("study_date"),
        )
        for image_id, uid in moved.items()
    ]
    return _study_ids(conn, records)
