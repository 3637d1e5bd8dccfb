"""The synthetic archive of ``serve_scale.py``: images written through the store's own batch
writes (or the same rows in bulk), and stored thumbnails for the images a measurement shows.

512-d unit embeddings in 64 clusters under the test stand-in encoder's id, CheXpert labels whose
rates depend on the cluster, two images per study, views, sexes, ages, dates and splits; every
image is the same whichever run writes it (deterministic per image number).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time

import numpy as np

from chexretrieve.findings import FINDINGS

DIM = 512
ENCODER = "stand-in:0:512"
ENCODER_ID = "stand-in:d512"
CLUSTERS = 64


def synthetic_items(start: int, count: int, seed: int = 0):
    """BatchItems of images ``start`` .. ``start + count - 1`` (deterministic per image)."""
    from chexretrieve.store import BatchItem, ImageRecord

    centres = np.random.default_rng(seed).standard_normal((CLUSTERS, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rates = np.random.default_rng(seed + 1).beta(0.6, 3.0, size=(CLUSTERS, len(FINDINGS)))
    rng = np.random.default_rng(seed + 2 + start)
    clusters = rng.integers(0, CLUSTERS, size=count)
    vectors = centres[clusters] + rng.standard_normal((count, DIM)) * (0.9 / np.sqrt(DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    draws = rng.random((count, len(FINDINGS)))
    mentioned = rng.random((count, len(FINDINGS))) < 0.7
    base = dt.date(2012, 1, 1)
    for j in range(count):
        i = start + j
        k = clusters[j]
        labels = None
        if i % 9:  # every ninth image has no labels
            labels = {}
            for f, finding in enumerate(FINDINGS):
                if not mentioned[j, f]:
                    labels[finding] = None
                elif draws[j, f] < rates[k, f]:
                    labels[finding] = 1.0
                else:
                    labels[finding] = -1.0 if draws[j, f] > 0.98 else 0.0
        record = ImageRecord(
            sop_uid=f"2.25.7{i:09d}",
            study_uid=f"2.25.8{i // 2:09d}",
            series_uid=f"2.25.9{i:09d}",
            pixel_sha256=hashlib.sha256(b"synthetic %d" % i).hexdigest(),
            patient_id=f"SYN{i // 6:07d}",
            patient_sex="MF"[i % 2],
            patient_age_years=float(18 + (i * 7919) % 75),
            study_date=base + dt.timedelta(days=(i * 104729) % 4000),
            view_position=("PA", "AP", "LATERAL")[i % 3],
            modality=("CR", "DX")[i % 2],
            pixel_rows=2048,
            pixel_columns=2048,
            source_path=f"/synthetic/p{i // 6:07d}/s{i // 2:09d}/{i:09d}.dcm",
            split=(("train",) * 14 + ("valid",) * 3 + ("test",) * 3)[i % 20],
        )
        yield BatchItem(path=record.source_path, record=record, embedding=vectors[j],
                        labels=labels)  # fmt: skip


def build_store(url: str, start: int, count: int, batch: int = 5000, bulk: bool = False) -> float:
    """Write images ``start`` .. through ``Store.write_batch`` (ingest's path), or with
    ``bulk`` the same rows straight into the SQLite tables in one transaction (a million images
    in minutes instead of hours; ``--check-bulk`` compares both on a small store)."""
    from chexretrieve.store import open_store

    started = time.perf_counter()
    with open_store(url) as store:
        store.register_encoder(ENCODER_ID, DIM, 20.0)
        revision = store.archive_revision()
        path = store.config.url.removeprefix("sqlite:///")
    if bulk:
        bulk_insert(path, start, count, revision + 1, batch)
        return time.perf_counter() - started
    with open_store(url) as store:
        for first in range(start, start + count, batch):
            items = list(synthetic_items(first, min(batch, start + count - first)))
            store.write_batch(ENCODER_ID, items)
    return time.perf_counter() - started


def bulk_insert(path: str, start: int, count: int, revision: int, batch: int) -> None:
    """The rows ``write_batch`` would write for these images, inserted with sqlite3."""
    import sqlite3

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("BEGIN")
        image_id = connection.execute("SELECT COALESCE(MAX(id), 0) FROM images").fetchone()[0]
        studies = dict(connection.execute("SELECT study_uid, id FROM studies"))
        for first in range(start, start + count, batch):
            images, embeddings, labels, changes = [], [], [], []
            for item in synthetic_items(first, min(batch, start + count - first)):
                r = item.record
                image_id += 1
                study = studies.get(r.study_uid)
                if study is None:
                    study = studies[r.study_uid] = len(studies) + 1
                    connection.execute(
                        "INSERT INTO studies (id, study_uid, patient_id, study_date) "
                        "VALUES (?, ?, ?, ?)",
                        (study, r.study_uid, r.patient_id, r.study_date.isoformat()),
                    )
                images.append((
                    image_id, r.sop_uid, study, r.series_uid, r.patient_id, r.patient_sex,
                    r.patient_age_years, r.study_date.isoformat(), r.view_position, r.modality,
                    r.pixel_rows, r.pixel_columns, r.pixel_sha256, r.source_path, r.split, now,
                ))  # fmt: skip
                embeddings.append(
                    (ENCODER_ID, image_id, DIM, item.embedding.astype("<f4").tobytes())
                )
                if item.labels:
                    labels += [(image_id, f, v) for f, v in item.labels.items()]
                changes.append((revision, image_id))
            connection.executemany(
                "INSERT INTO images (id, sop_uid, study_id, series_uid, patient_id, patient_sex, "
                "patient_age_years, study_date, view_position, modality, pixel_rows, "
                "pixel_columns, pixel_sha256, source_path, split, ingested_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                images,
            )
            connection.executemany("INSERT INTO embeddings VALUES (?, ?, ?, ?)", embeddings)
            connection.executemany("INSERT INTO labels VALUES (?, ?, ?)", labels)
            connection.executemany(
                "INSERT INTO archive_changes (revision, image_id) VALUES (?, ?)", changes
            )
            print(f"  store: {image_id:,} images", flush=True)
        connection.execute(
            "INSERT INTO archive_revision (id, revision, updated_at) VALUES (1, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET revision = excluded.revision, "
            "updated_at = excluded.updated_at",
            (revision, now),
        )
        connection.commit()
    finally:
        connection.close()


def store_thumbnails(url: str, image_ids, max_side: int = 256) -> int:
    """Store a thumbnail for each of ``image_ids`` as ingest stores one (8-bit greyscale PNG,
    longest side ``max_side``), each of a different phantom radiograph (a browser decodes every
    one); the bytes written."""
    from chexretrieve.dicom import thumbnail_png
    from chexretrieve.phantom import PhantomConfig, generate_case
    from chexretrieve.store import Thumbnail, open_store

    config = PhantomConfig()
    thumbnails = {
        int(i): Thumbnail(
            thumbnail_png(generate_case(11, int(i), config).image, max_side), max_side
        )  # fmt: skip
        for i in image_ids
    }
    with open_store(url) as store:
        store.put_thumbnails(thumbnails, replace=True)
    return sum(len(t.png) for t in thumbnails.values())


def remove_thumbnails(path: str, image_ids) -> None:
    """Delete the stored thumbnails of ``image_ids`` (the archive is left as it was built)."""
    import sqlite3

    connection = sqlite3.connect(path)
    try:
        ids = sorted({int(i) for i in image_ids})
        connection.executemany("DELETE FROM thumbnails WHERE image_id = ?", [(i,) for i in ids])
        connection.commit()
    finally:
        connection.close()
