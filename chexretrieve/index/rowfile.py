"""Row files: plain ``.npy`` files of row-aligned data, appended in place, checked block by block.

Every per-row file of the archive index is a ``.npy`` file (``np.load(path, mmap_mode="r")``
reads it) whose header is padded to ``HEADER_BYTES``, so the header can be rewritten in place when
rows are appended, and the rows start at a fixed offset. Row ``i`` of every file is the same
archived image.

Each file's rows are cut into blocks of ``block_rows`` rows (about ``BLOCK_BYTES`` each); the
manifest records the SHA-256 of every block (the last one may be partial), sealed with the rest
of the manifest (``chexretrieve.seal``). A reader verifies a block before it trusts a row of it,
once per process: a search verifies the blocks it reads (the query's embedding row, the feature
matrix it scans), not the whole archive, so a cold process opens a million-image index in well
under a second while still never serving a damaged byte.

A file only ever grows in place; rows past the committed count (a build killed while appending)
are cut off by the next writer. A file whose committed rows must change is written anew under
another name, so a process still reading the old generation keeps its rows.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chexretrieve.search.foreground import FOREGROUND

#: bytes of every row file's header (magic, version, length, the padded dictionary); rows follow
HEADER_BYTES = 256

#: target bytes per verified block (a block holds a power-of-two number of rows)
BLOCK_BYTES = 1 << 20
_MAGIC = b"\x93NUMPY\x01\x00"


class IndexDamaged(ValueError):
    """An index file that does not match its seal (damaged, truncated, replaced)."""


@dataclass(frozen=True)
class RowFileRecord:
    """What the manifest says of one row file."""

    # path relative to the index folder
    file: str
    # numpy dtype name: float32, float16, int64, int32, int16, int8, |S64 ...
    dtype: str
    # columns per row; 0 for a file of single values (a 1-D array)
    width: int
    # committed rows
    rows: int
    # rows per verified block
    block_rows: int
    # SHA-256 (hex) of each block's bytes, the last block possibly partial
    blocks: tuple[str, ...] = field(default=())

    @property
    def row_bytes(self) -> int:
        return np.dtype(self.dtype).itemsize * max(1, self.width)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, self.width) if self.width else (self.rows,)

    def digest(self) -> str:
        """One SHA-256 standing for the whole content (what the seal's ``files`` name)."""
        body = json.dumps([self.dtype, self.width, self.rows, self.block_rows, list(self.blocks)])
        return hashlib.sha256(body.encode()).hexdigest()

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "dtype": self.dtype,
            "width": self.width,
            "rows": self.rows,
            "block_rows": self.block_rows,
            "blocks": list(self.blocks),
        }

    @classmethod
    def from_dict(cls, data: dict) -> RowFileRecord:
        return cls(
            str(data["file"]),
            str(data["dtype"]),
            int(data["width"]),
            int(data["rows"]),
            int(data["block_rows"]),
            tuple(str(b) for b in data["blocks"]),
        )


def block_rows_for(dtype: str, width: int) -> int:
    """Rows per block: the power of two nearest ``BLOCK_BYTES`` / row bytes (at least 64)."""
    row = np.dtype(dtype).itemsize * max(1, width)
    return max(64, 1 << max(0, round(np.log2(max(1, BLOCK_BYTES // row)))))


def header_bytes(dtype: str, shape: tuple[int, ...]) -> bytes:
    """A version 1.0 ``.npy`` header for ``shape`` padded to exactly ``HEADER_BYTES``."""
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    text = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    room = HEADER_BYTES - len(_MAGIC) - 2
    if len(text) + 1 > room:
        raise ValueError(f"a row file header for shape {shape} does not fit {HEADER_BYTES} bytes")
    body = (text + " " * (room - len(text) - 1) + "\n").encode("latin1")
    return _MAGIC + struct.pack("<H", len(body)) + body


def read_header(path: Path) -> tuple[str, tuple[int, ...]]:
    """(dtype name, shape) of a row file; IndexDamaged when it is not one."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(HEADER_BYTES)
    except OSError as exc:
        raise IndexDamaged(f"{path.name} cannot be read ({exc.strerror or exc})") from None
    if len(raw) < HEADER_BYTES or raw[: len(_MAGIC)] != _MAGIC:
        raise IndexDamaged(f"{path.name} is not a row file (its header is damaged)")
    (length,) = struct.unpack("<H", raw[len(_MAGIC) : len(_MAGIC) + 2])
    if length != HEADER_BYTES - len(_MAGIC) - 2:
        raise IndexDamaged(f"{path.name} has a header of another length")
    try:
        meta = ast.literal_eval(raw[len(_MAGIC) + 2 :].decode("latin1").strip())
        dtype = np.dtype(np.lib.format.descr_to_dtype(meta["descr"])).str
        shape = tuple(int(x) for x in meta["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError):
        raise IndexDamaged(f"{path.name} has an unreadable header") from None
    return dtype, shape


class RowAppender:
    """Appends rows to a row file (created when missing) and keeps its block digests.

    Opening cuts the file back to ``record.rows`` (rows a killed writer left past the committed
    count). ``checkpoint`` makes the rows written so far durable and returns their record."""

    def __init__(self, folder: Path, record: RowFileRecord):
        self.folder = Path(folder)
        self.record = record
        self.path = self.folder / record.file
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._dtype = np.dtype(record.dtype)
        self._row_bytes = record.row_bytes
        self._rows = record.rows
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        self._fd = os.open(self.path, flags, 0o600)
        try:
            end = HEADER_BYTES + self._rows * self._row_bytes
            size = os.fstat(self._fd).st_size
            if size < end:
                if self._rows:
                    raise IndexDamaged(
                        f"{record.file} holds {size} bytes, fewer than its {self._rows} rows"
                    )
                os.ftruncate(self._fd, HEADER_BYTES)
            elif size > end:
                os.ftruncate(self._fd, end)
            self._write_header()
            full = self._rows // record.block_rows
            self._blocks = list(record.blocks[:full])
            tail_rows = self._rows - full * record.block_rows
            self._tail = os.pread(
                self._fd, tail_rows * self._row_bytes, HEADER_BYTES + full * record.block_rows
                * self._row_bytes,
            )  # fmt: skip
            if tail_rows and hashlib.sha256(self._tail).hexdigest() != record.blocks[-1]:
                raise IndexDamaged(f"the last block of {record.file} does not match its seal")
        except BaseException:
            os.close(self._fd)
            raise

    @property
    def rows(self) -> int:
        return self._rows

    def _write_header(self) -> None:
        shape = (self._rows, self.record.width) if self.record.width else (self._rows,)
        os.pwrite(self._fd, header_bytes(self.record.dtype, shape), 0)

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self._dtype)
        width = rows.shape[1] if rows.ndim == 2 else 0
        if rows.ndim not in (1, 2) or width != self.record.width:
            raise ValueError(
                f"rows of shape {rows.shape} do not fit {self.record.file} "
                f"({self.record.dtype}, width {self.record.width})"
            )
        data = rows.tobytes()
        offset = HEADER_BYTES + self._rows * self._row_bytes
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            offset += written
            view = view[written:]
        self._rows += len(rows)
        block = self.record.block_rows * self._row_bytes
        pending = self._tail + data
        start = 0
        while len(pending) - start >= block:
            self._blocks.append(hashlib.sha256(pending[start : start + block]).hexdigest())
            start += block
        self._tail = pending[start:]

    def checkpoint(self) -> RowFileRecord:
        """Header rewritten, bytes on disk; the record of the rows written so far."""
        self._write_header()
        os.fsync(self._fd)
        blocks = list(self._blocks)
        if self._tail:
            blocks.append(hashlib.sha256(self._tail).hexdigest())
        return RowFileRecord(
            self.record.file, self.record.dtype, self.record.width, self._rows,
            self.record.block_rows, tuple(blocks),
        )  # fmt: skip

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> RowAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def new_record(file: str, dtype: str, width: int) -> RowFileRecord:
    """The record of an empty row file (written by a RowAppender)."""
    dtype = np.dtype(dtype).str if np.dtype(dtype).kind == "S" else np.dtype(dtype).name
    return RowFileRecord(file, dtype, int(width), 0, block_rows_for(dtype, width), ())


def write_rows(folder: Path, file: str, rows: np.ndarray) -> RowFileRecord:
    """A new row file holding ``rows`` (replacing one of that name); its record."""
    rows = np.asarray(rows)
    record = new_record(file, rows.dtype.str if rows.dtype.kind == "S" else rows.dtype.name,
                        rows.shape[1] if rows.ndim == 2 else 0)  # fmt: skip
    path = Path(folder) / file
    path.unlink(missing_ok=True)
    with RowAppender(folder, record) as appender:
        for start in range(0, len(rows), 1 << 16):
            appender.append(rows[start : start + (1 << 16)])
        return appender.checkpoint()


# ------------------------------------------------------------------------------- reading
_VERIFIED: dict[tuple, dict[int, str]] = {}
_VERIFIED_LOCK = threading.Lock()


class MappedRows:
    """A row file mapped read-only (shared with every process that maps it), its blocks verified
    against the record on use: ``rows(...)`` checks the blocks it returns, ``verify()`` all."""

    def __init__(self, folder: Path, record: RowFileRecord, on_damage=None):
        self.record = record
        self.path = Path(folder) / record.file
        # called with the IndexDamaged before it is raised (the index queues a rebuild)
        self.on_damage = on_damage
        try:
            info = os.stat(self.path)
        except OSError as exc:
            raise IndexDamaged(f"{record.file} is missing ({exc.strerror or exc})") from None
        need = HEADER_BYTES + record.rows * record.row_bytes
        if info.st_size < need:
            raise IndexDamaged(
                f"{record.file} holds {info.st_size} bytes, fewer than its {record.rows} rows"
            )
        dtype, shape = read_header(self.path)
        if np.dtype(dtype) != np.dtype(record.dtype) or not shape or shape[0] < record.rows:
            raise IndexDamaged(f"{record.file} holds {shape} {dtype}, not what its seal names")
        if (shape[1] if len(shape) == 2 else 0) != record.width:
            raise IndexDamaged(f"{record.file} has rows {shape[1:]} wide, not {record.width}")
        self._key = (str(self.path), info.st_dev, info.st_ino)
        if record.rows:
            self.array = np.memmap(self.path, record.dtype, "r", HEADER_BYTES, record.shape)
            self._raw = np.memmap(self.path, np.uint8, "r", HEADER_BYTES,
                                  (record.rows * record.row_bytes,))  # fmt: skip
        else:
            self.array = np.empty(record.shape, dtype=record.dtype)
            self._raw = np.empty(0, dtype=np.uint8)
        with _VERIFIED_LOCK:
            self._done = _VERIFIED.setdefault(self._key, {})
        self._verifying = threading.Lock()  # one thread hashes a block; the others wait

    def verify(self, start: int = 0, stop: int | None = None) -> None:
        """Check the blocks holding rows [start, stop) (default: all); IndexDamaged names the
        file when one does not match."""
        record = self.record
        stop = record.rows if stop is None else min(int(stop), record.rows)
        if stop <= start:
            return
        size = record.block_rows * record.row_bytes
        for block in range(int(start) // record.block_rows, (stop - 1) // record.block_rows + 1):
            wanted = record.blocks[block] if block < len(record.blocks) else None
            if wanted is not None and self._done.get(block) == wanted:
                continue
            FOREGROUND.wait_if_background()
            with self._verifying:
                self._verify_block(block, wanted, size)

    def _verify_block(self, block: int, wanted: str | None, size: int) -> None:
        record = self.record
        if wanted is not None and self._done.get(block) == wanted:
            return  # another thread verified it while this one waited
        chunk = memoryview(self._raw[block * size : (block + 1) * size])
        if wanted is None or hashlib.sha256(chunk).hexdigest() != wanted:
            damaged = IndexDamaged(
                f"{record.file}: rows {block * record.block_rows:,}-"
                f"{min(record.rows, (block + 1) * record.block_rows) - 1:,} do not match the "
                "index's seal (the file was damaged or replaced); it is rebuilt"
            )
            if self.on_damage is not None:
                self.on_damage(damaged)
            raise damaged
        self._done[block] = wanted

    def complete(self) -> bool:
        """Whether every block has been verified in this process (nothing left to hash)."""
        done, blocks = self._done, self.record.blocks
        return all(done.get(i) == digest for i, digest in enumerate(blocks))

    def verify_rows(self, rows) -> None:
        """Check the blocks holding the given row numbers."""
        rows = np.unique(np.asarray(rows, dtype=np.int64).reshape(-1))
        if rows.size and (rows[0] < 0 or rows[-1] >= self.record.rows):
            raise IndexError(f"rows {rows[[0, -1]].tolist()} outside {self.record.file}")
        for block in np.unique(rows // self.record.block_rows).tolist():
            self.verify(block * self.record.block_rows, (block + 1) * self.record.block_rows)

    def rows(self, rows) -> np.ndarray:
        """The given rows (verified) as an in-memory array."""
        self.verify_rows(rows)
        return np.asarray(self.array[np.asarray(rows, dtype=np.int64)])

    def all(self) -> np.ndarray:
        """The whole mapped array, every block verified first."""
        self.verify()
        return self.array


def forget_verified() -> None:
    """Drop this process's memory of verified blocks (tests that damage files in place)."""
    with _VERIFIED_LOCK:
        for done in _VERIFIED.values():
            done.clear()
