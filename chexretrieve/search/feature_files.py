"""Gallery feature files on disk, each checked against a record of its content and inputs.

An entry is two files in the features folder: ``<key>.npy`` (the (n, d) feature rows in the
storage dtype) and ``<key>.json``, its record: the SHA-256 and byte count of the ``.npy`` file,
its shape and dtype, the inputs it was computed from (encoder, archive fingerprint and revision,
anchor set and its content hash, geometry and settings) with their SHA-256, and a keyed seal
(:mod:`chexretrieve.seal`, the install's key) over the payload's SHA-256, its size, shape and
dtype and the inputs' SHA-256. A file is served only when every one of these matches what the
search asks for, the seal is this install's, and its rows are finite and not all zero; anything
else (another entry's file copied or linked in, flipped bytes, a short, empty or unreadable file, a
folder in its place, a missing or foreign record, a record whose checksum was recomputed by
someone without the key) is reported by :func:`read_feature_file` with the reason, and the
features are recomputed.

Writing: payload first, then the record, each into a temporary file that is fsync'ed and renamed
over the final name (the folder is fsync'ed after); a reader sees the old entry, the new one, or
a payload whose record does not match it yet (recomputed), never half a file.

The seal also stands against someone who may write the folder but not read the install's key
(a plain checksum they would recompute); the folder is still created with mode 0700.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
from pathlib import Path

import numpy as np

from chexretrieve.seal import SealError, check_seal, seal

#: 2: records carry a keyed seal (format 1 records are recomputed)
RECORD_FORMAT = 2
#: the seal's kind
SEAL_KIND = "feature-block"


def inputs_digest(inputs: dict) -> str:
    """SHA-256 of the inputs, key order independent."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def sealed_inputs(inputs: dict, shape, dtype: str, size: int) -> dict:
    """What an entry's seal covers besides its payload's SHA-256."""
    return {
        "inputs_sha256": inputs_digest(inputs),
        "shape": [int(x) for x in shape],
        "dtype": str(dtype),
        "bytes": int(size),
    }


def record_path(path: Path) -> Path:
    return path.with_suffix(".json")


class FeatureFileRejected(Exception):
    """A cached feature file that must not be served; ``str()`` says why."""


def _regular(path: Path, what: str) -> os.stat_result | None:
    """lstat of ``path`` when it is a regular file; None when it does not exist."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        reason = exc.strerror or exc
        raise FeatureFileRejected(f"its {what} cannot be examined ({reason})") from None
    if stat.S_ISLNK(info.st_mode):
        raise FeatureFileRejected(f"its {what} is a symbolic link")
    if stat.S_ISDIR(info.st_mode):
        raise FeatureFileRejected(f"its {what} is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise FeatureFileRejected(f"its {what} is not a regular file")
    return info


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 24)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_feature_file(
    path: Path, inputs: dict, shape: tuple[int, int], dtype: str
) -> np.ndarray | None:
    """The rows stored at ``path`` (a read-only view), None when no entry exists;
    FeatureFileRejected when one exists that must not be served."""
    info = _regular(path, "payload")
    record_info = _regular(record_path(path), "record")
    if info is None and record_info is None:
        return None
    if info is None:
        raise FeatureFileRejected("its payload is missing")
    if record_info is None:
        raise FeatureFileRejected("it has no record of its content (written before records)")
    try:
        record = json.loads(_read(record_path(path)))
        wanted_payload = str(record["payload_sha256"])
        wanted_bytes = int(record["bytes"])
        recorded_inputs = str(record["inputs_sha256"])
        recorded_shape = tuple(int(x) for x in record["shape"])
        recorded_dtype = str(record["dtype"])
        recorded_format = int(record["format"])
    except OSError as exc:
        raise FeatureFileRejected(f"its record cannot be read ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError):
        raise FeatureFileRejected("its record is not a feature record") from None
    if recorded_format != RECORD_FORMAT:
        raise FeatureFileRejected(f"its record has format {recorded_format}")
    if recorded_inputs != inputs_digest(inputs):
        raise FeatureFileRejected("it was computed from other inputs (archive, anchors, geometry)")
    if recorded_shape != tuple(shape) or recorded_dtype != dtype:
        raise FeatureFileRejected(f"its record names shape {recorded_shape} {recorded_dtype}")
    if info.st_size != wanted_bytes:
        raise FeatureFileRejected(f"it holds {info.st_size} bytes, its record {wanted_bytes}")
    try:
        data = _read(path)
    except OSError as exc:
        raise FeatureFileRejected(f"it cannot be read ({exc.strerror or exc})") from None
    measured = hashlib.sha256(data).hexdigest()
    if measured != wanted_payload:
        raise FeatureFileRejected("its content does not match its recorded SHA-256")
    try:
        check_seal(
            record.get("seal"), SEAL_KIND, {"payload": measured},
            sealed_inputs(inputs, shape, dtype, len(data)),
        )  # fmt: skip
    except SealError as exc:
        raise FeatureFileRejected(f"its record's seal fails: {exc}") from None
    rows = _parse_npy(data, tuple(shape), dtype)
    if not np.isfinite(rows).all():
        raise FeatureFileRejected("it holds NaN or infinite values")
    if rows.size and not rows.any():
        raise FeatureFileRejected("it holds only zeros")
    return rows


def _parse_npy(data: bytes, shape: tuple[int, int], dtype: str) -> np.ndarray:
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            found_shape, fortran, found_dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            found_shape, fortran, found_dtype = np.lib.format.read_array_header_2_0(stream)
    except ValueError as exc:
        raise FeatureFileRejected(f"it is not a .npy file ({exc})") from None
    if tuple(found_shape) != shape or found_dtype != np.dtype(dtype) or fortran:
        raise FeatureFileRejected(f"it holds {found_shape} {found_dtype}, not {shape} {dtype}")
    count = int(np.prod(shape))
    offset = stream.tell()
    if len(data) - offset != count * found_dtype.itemsize:
        raise FeatureFileRejected("its length does not match its header")
    return np.frombuffer(data, dtype=found_dtype, count=count, offset=offset).reshape(shape)


def write_feature_file(path: Path, rows: np.ndarray, inputs: dict) -> None:
    """Write the entry (payload, then record), each fsync'ed before its rename; OSError when the
    folder cannot be written (read-only, full, a folder in the entry's place), SealError when the
    install's key cannot be had (nothing is written)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(rows), allow_pickle=False)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    sealed = sealed_inputs(inputs, rows.shape, np.dtype(rows.dtype).name, len(payload))
    record = {
        "format": RECORD_FORMAT,
        "seal": seal(SEAL_KIND, {"payload": digest}, sealed),
        "payload_sha256": digest,
        "bytes": len(payload),
        "shape": list(rows.shape),
        "dtype": np.dtype(rows.dtype).name,
        "inputs_sha256": inputs_digest(inputs),
        "inputs": inputs,
    }
    text = json.dumps(record, sort_keys=True, indent=1, default=str).encode()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _replace_with(path, payload)
    _replace_with(record_path(path), text)
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _replace_with(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{id(data):x}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    import errno

                    raise OSError(errno.ENOSPC, "no space left on device")
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
