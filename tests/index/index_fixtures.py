"""Small stores for the archive-index tests: written through ``Store.write_batch`` (the path
ingest takes), with the stand-in encoder's dimension, labels, blanks and unlabelled images."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import numpy as np

from chexretrieve.findings import FINDINGS
from chexretrieve.store import BatchItem, ImageRecord, open_store

DIM = 32
ENCODER_ID = f"stand-in:d{DIM}"


def stand_in():
    os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = "1"
    from chexretrieve.encoders.stand_in import StandInEncoder

    return StandInEncoder(dim=DIM)


def record(i: int, **overrides) -> ImageRecord:
    fields = dict(
        sop_uid=f"1.2.826.0.9.{i}",
        study_uid=f"1.2.826.0.8.{i // 2}",  # two images per study
        series_uid=f"1.2.826.0.7.{i}",
        pixel_sha256=hashlib.sha256(f"pixels {i}".encode()).hexdigest(),
        patient_id=f"P{i % 37}",
        patient_sex=("M", "F", None)[i % 3],
        patient_age_years=None if i % 11 == 0 else float(18 + i % 70),
        study_date=None if i % 13 == 0 else dt.date(2019, 1, 1) + dt.timedelta(days=i % 1000),
        view_position=("PA", "AP", "LATERAL", "pa")[i % 4],
        modality="CR" if i % 2 else "DX",
        pixel_rows=512 + i % 3,
        pixel_columns=None if i % 7 == 0 else 480,
        source_path=f"/archive/{'deep/' * (i % 5)}{i}.dcm",
        split=("train", "valid", "test", None)[i % 4],
    )
    fields.update(overrides)
    return ImageRecord(**fields)


def labels_of(i: int, rng: np.random.Generator) -> dict | None:
    if i % 6 == 0:
        return None  # unlabelled
    values = rng.choice([1.0, 0.0, -1.0, np.nan, np.nan], size=len(FINDINGS))
    return {f: (None if np.isnan(v) else float(v)) for f, v in zip(FINDINGS, values, strict=True)}


def embedding(i: int) -> np.ndarray:
    vector = np.random.default_rng(10_000 + i).standard_normal(DIM).astype(np.float32)
    cluster = np.zeros(DIM, dtype=np.float32)
    cluster[i % 4] = 2.0  # a little structure: four clusters
    vector += cluster
    return vector / np.linalg.norm(vector)


def add_images(store, start: int, count: int, batch: int = 500) -> list[int]:
    """Store images ``start`` .. ``start + count - 1``; their image ids."""
    encoder = stand_in()
    store.register_encoder(encoder.encoder_id, DIM, encoder.inv_temperature)
    rng = np.random.default_rng(start)
    ids = []
    items = []
    for i in range(start, start + count):
        items.append(BatchItem(path=f"/archive/{i}.dcm", record=record(i), embedding=embedding(i),
                               labels=labels_of(i, rng)))  # fmt: skip
        if len(items) == batch:
            ids += [o.image_id for o in store.write_batch(encoder.encoder_id, items)]
            items = []
    if items:
        ids += [o.image_id for o in store.write_batch(encoder.encoder_id, items)]
    return ids


def make_store(path: Path, count: int):
    store = open_store(f"sqlite:///{path}")
    add_images(store, 0, count)
    return store
