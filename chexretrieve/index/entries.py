"""Feature entries of an index: one geometry's features of every archived image, one row file.

An entry is keyed by the geometry's fit (``FeatureCache.geometry``'s key: the geometry, the
anchor set's content hash, the encoder's inverse temperature, the broad prior's hash, the fit
seed) and the stored dtype. Its rows are computed exactly as the in-memory search computes them
(``geometry.features`` of the unit float32 embeddings, ``ROW_CHUNK`` rows at a time) and stored
as a ``KeyMatrix`` holds them (float16 rows zero-padded to FAISS's SIMD width), so a search maps
the file and scans it in place (``KeyMatrix.mapped``). Plain geometries (cosine, ITI) stored in
float32 are the embeddings file itself.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable

import numpy as np

from chexretrieve.findings import finding_slug
from chexretrieve.index.rowfile import (
    HEADER_BYTES,
    MappedRows,
    RowAppender,
    RowFileRecord,
    new_record,
)
from chexretrieve.search.scoring import ROW_CHUNK, KeyMatrix, stored_width

#: feature rows computed between two checkpoints of a build
CHECKPOINT_ROWS = 8 * ROW_CHUNK


def entry_key(geometry_key: str, dtype: str) -> str:
    """The entry's name in the manifest: the fit's key and the stored dtype."""
    return f"{geometry_key.replace('geom:', 'g')}-{'f16' if dtype == 'float16' else 'f32'}"


def reuses_embeddings(geometry, dtype: str) -> bool:
    """Plain geometries in float32: the features are the embeddings file itself."""
    return geometry.layout == "plain" and dtype == "float32"


def unit_float32(rows) -> np.ndarray:
    """Embedding rows as float32, as the in-memory search feeds them to a geometry."""
    out = np.asarray(rows, dtype=np.float32)
    if np.asarray(rows).dtype != np.float32:
        out = out / np.linalg.norm(out, axis=1, keepdims=True)
    return out


def new_entry(
    finding: str, anchor, spec, geometry, geometry_key: str, inputs: dict, dtype: str, serial: int,
    dim: int,
) -> dict:  # fmt: skip
    """The manifest dictionary of an empty entry (its row file not written yet); ``dim``: the
    embeddings' (the width of a plain geometry's features)."""
    width = int(dim) if geometry.layout == "plain" else int(geometry.feature_dim)
    name = f"features/{finding_slug(finding)}/{spec.name}-{geometry_key[5:17]}.{serial:04d}.npy"
    record = new_record(name, dtype, stored_width(width, dtype))
    return {
        "finding": finding,
        "anchor_key": anchor.key,
        "anchor_sha": anchor.content_hash,
        "geometry": spec.name,
        "geometry_key": geometry_key,
        "dtype": dtype,
        "width": width,
        "inputs": dict(inputs),
        "file": record.as_dict(),
        "calibrations": {},
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def extend_entry(
    folder,
    entry: dict,
    geometry,
    embeddings: MappedRows,
    checkpoint: Callable[[dict], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Compute the entry's features of the archive rows it does not hold yet (all of them for a
    new entry); ``checkpoint(entry)`` after every ``CHECKPOINT_ROWS`` rows. The entry."""
    total = embeddings.record.rows
    if reuses_embeddings(geometry, entry["dtype"]):
        entry["file"] = embeddings.record.as_dict()
        return entry
    record = RowFileRecord.from_dict(entry["file"])
    if record.rows > total:
        raise ValueError(f"entry {record.file} holds more rows than the archive")
    with RowAppender(folder, record) as appender:
        since = 0
        for start in range(record.rows, total, ROW_CHUNK):
            stop = min(total, start + ROW_CHUNK)
            embeddings.verify(start, stop)
            rows = unit_float32(embeddings.array[start:stop])
            if geometry.layout != "plain":
                rows = geometry.features(rows)
            keys = KeyMatrix.from_rows(rows, entry["dtype"])
            appender.append(keys.stored_rows)
            since += stop - start
            if progress is not None:
                progress(stop, total)
            if checkpoint is not None and since >= CHECKPOINT_ROWS:
                entry["file"] = appender.checkpoint().as_dict()
                checkpoint(entry)
                since = 0
        entry["file"] = appender.checkpoint().as_dict()
    return entry


def entry_keys(folder, entry: dict) -> KeyMatrix:
    """The entry's features as a KeyMatrix over its (verified) row file, scanned in place."""
    record = RowFileRecord.from_dict(entry["file"])
    mapped = MappedRows(folder, record)
    mapped.verify()
    return KeyMatrix.mapped(mapped.path, HEADER_BYTES, record.rows, int(entry["width"]),
                            record.width, entry["dtype"])  # fmt: skip


def labels_digest(codes: np.ndarray) -> str:
    """What a calibration's labels were (it is measured again when they change)."""
    return hashlib.sha256(np.ascontiguousarray(codes).tobytes()).hexdigest()[:24]
