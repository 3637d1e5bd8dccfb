"""Gallery key rows stored once (float32 or float16) and scanned exactly by FAISS.

Every geometry scores a gallery as ``query_vector · f_k + offset`` (``chexretrieve.geometry.base``),
so an exact search is a maximum-inner-product scan over the cached feature rows. ``KeyMatrix``
holds those rows inside a FAISS flat index (``IndexFlatIP`` for float32, ``IndexScalarQuantizer``
with ``QT_fp16`` for float16) and exposes them to numpy as a read-only view of the same memory, so
the rows are held once: the view keeps its ``KeyMatrix`` alive, however it is sliced or passed on.

Why FAISS: its flat scans are SIMD loops that decode float16 on the fly and keep a top-k heap, one
thread per query; numpy has no float16 BLAS (casting a chunk to float32 first costs more than the
scan) and a full score vector plus argpartition touches the gallery twice. float16 halves the bytes
a scan reads and the memory held; scores are accumulated in float32 either way. FAISS decodes
float16 with SIMD only when the row width is a multiple of its SIMD lanes (8 with AVX2, 16 with
AVX-512), and falls back to a scalar loop 4-14x slower otherwise (1025-wide rows, 100k of them:
204 ms instead of 41), so float16 rows are stored zero-padded to that multiple; ``array`` hides the
padding.

FAISS scans one query on one thread. ``top_k(threads=...)`` splits the rows into contiguous ranges
(``IDSelectorRange``) scanned by several threads at once (FAISS releases the GIL) and merges their
top k; on this project's 2-core machine, already loaded by other jobs (load average ~3), two
threads scanned 400k rows 1.3-1.6x faster than one (float32 and float16, 99 to 1025 wide).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

#: storage dtypes of gallery embeddings and features (SearchConfig.storage_dtype)
STORAGE_DTYPES = ("float32", "float16")
#: rows converted and added together (bounds the float32 temporaries of float16 storage)
ROW_CHUNK = 16384
#: fewest bytes of rows per part of a scan split across threads: a shorter scan gains less than
#: waiting for a second core costs on a busy machine (100k x 99 float32 rows, 40 MB, scanned
#: 1-2 ms slower in two parts than in one at load ~3)
SPLIT_MIN_BYTES = 48 << 20

#: most rows a scan without the mask returns for the disallowed ones to be dropped afterwards
OVERSCAN_ROWS = 4096

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()

_BLAS_LOCK = threading.Lock()
_BLAS_STATE: dict = {"setters": None, "holders": 0, "saved": ()}


def _blas_thread_setters() -> tuple:
    """``openblas_set_num_threads_local`` of every OpenBLAS loaded that has one (>= 0.3.27:
    numpy's; FAISS bundles an older one without it). Each sets its library's process-wide BLAS
    thread count and returns the previous count. Empty for another BLAS."""
    if _BLAS_STATE["setters"] is None:
        import ctypes

        from threadpoolctl import ThreadpoolController  # installed with scikit-learn

        setters = []
        for lib in ThreadpoolController().lib_controllers:
            setter = getattr(lib.dynlib, "openblas_set_num_threads_local", None)
            if lib.internal_api == "openblas" and setter is not None:
                setter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
                setters.append(setter)
        _BLAS_STATE["setters"] = tuple(setters)
    return _BLAS_STATE["setters"]


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread while a query's own features are computed.

    A query's features are a few small products (1 x 512 by 512 x 1971 for a 4-component
    posterior GMM). On two BLAS threads OpenBLAS's helper thread keeps spinning on the second
    core after the product, just when the second half of a split gallery scan needs that core:
    at 1M images (gmm_posterior, float16, two scan threads) p50 190 -> 141 ms with the limit,
    from the main thread or a worker thread alike (``benchmarks/blas_limit.py``). OpenBLAS's
    count is process-wide, so overlapping holders share one limit: the first sets it, the last
    restores the count it found (one save/restore per holder would leave one thread for good
    when two overlap), and BLAS work elsewhere in the process runs on one thread meanwhile (a
    few ms per search)."""
    setters = _blas_thread_setters()
    with _BLAS_LOCK:
        if _BLAS_STATE["holders"] == 0:
            _BLAS_STATE["saved"] = tuple(setter(1) for setter in setters)
        _BLAS_STATE["holders"] += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_STATE["holders"] -= 1
            if _BLAS_STATE["holders"] == 0:
                for setter, count in zip(setters, _BLAS_STATE["saved"], strict=True):
                    setter(count)


def _faiss():
    import faiss  # a dependency; imported when the first gallery is stored

    return faiss


def check_storage_dtype(dtype: str) -> str:
    if dtype not in STORAGE_DTYPES:
        raise ValueError(
            f"unknown storage dtype {dtype!r}; choose one of: {', '.join(STORAGE_DTYPES)}"
        )
    return dtype


def _stored_width(width: int, dtype: np.dtype) -> int:
    """Row width FAISS holds: float16 rows padded to a multiple of its SIMD lanes."""
    if dtype == np.float32 or width == 0:
        return width
    lanes = 16 if "AVX512" in _faiss().get_compile_options() else 8
    return -(-width // lanes) * lanes


def stored_width(width: int, dtype: str) -> int:
    """The row width a KeyMatrix of ``dtype`` holds ``width`` numbers in (float16 rows padded to
    FAISS's SIMD lanes)."""
    return _stored_width(int(width), np.dtype(check_storage_dtype(dtype)))


_HEADERS: dict[tuple, bytes] = {}


def _faiss_header(dtype: np.dtype, width: int, rows: int) -> bytes:
    """The bytes FAISS writes before the rows of a flat index of ``rows`` rows: the header of a
    one-row index of the kind, with its row count and its codes' length scaled to ``rows``."""
    key = (dtype.name, width)
    if key not in _HEADERS:
        faiss = _faiss()
        if dtype == np.float32:
            index = faiss.IndexFlatIP(width)
        else:
            index = faiss.IndexScalarQuantizer(
                width, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
            )
        index.add(np.zeros((1, width), dtype=np.float32))
        data = faiss.serialize_index(index).tobytes()
        _HEADERS[key] = data[: len(data) - width * dtype.itemsize]
    one = bytearray(_HEADERS[key])
    if one[8:16] != (1).to_bytes(8, "little"):
        raise ValueError("unexpected FAISS index header (its row count is not where it was)")
    unit = int.from_bytes(one[-8:], "little")  # the codes' length of one row, in FAISS's unit
    one[8:16] = int(rows).to_bytes(8, "little")
    one[-8:] = (unit * int(rows)).to_bytes(8, "little")
    return bytes(one)


def _one_omp_thread() -> None:
    _faiss().omp_set_num_threads(1)  # per thread: each part of a scan runs on one core


def _scan_pool(threads: int) -> ThreadPoolExecutor:
    """Worker threads for the parts of split scans (FAISS releases the GIL while it scans)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(
                threads - 1, thread_name_prefix="chexretrieve-scan", initializer=_one_omp_thread
            )
        return pool


class _BorrowedMemory:
    """Bytes that ``owner`` (a FAISS index) holds, exposed to numpy: every array over them keeps
    the owner alive (numpy's view chains end at this object, which is not an array). It holds the
    index, not the KeyMatrix: numpy arrays are not traced by the garbage collector, so a cycle
    through an array's base would never be freed."""

    def __init__(self, owner: object, address: int, nbytes: int, width: int):
        self.owner = owner
        self.width = width  # row width the arrays over these bytes show (the rest is padding)
        self.__array_interface__ = {
            "data": (address, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }


class KeyMatrix:
    """(n, width) key rows in ``dtype``, held inside a FAISS flat index; build with ``from_rows``
    (any float rows, converted chunk by chunk) or ``from_stored`` (rows already in ``dtype``)."""

    def __init__(self, width: int, dtype: str):
        faiss = _faiss()
        self.dtype = np.dtype(check_storage_dtype(dtype))
        self.width = int(width)
        stored = _stored_width(self.width, self.dtype)
        if self.dtype == np.float32:
            self._index = faiss.IndexFlatIP(stored)
        else:
            self._index = faiss.IndexScalarQuantizer(
                stored, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
            )
        self._array = np.empty((0, self.width), dtype=self.dtype)

    @property
    def _stored_width(self) -> int:
        return int(self._index.d)

    def _padded(self, rows: np.ndarray) -> np.ndarray:
        """float32 rows widened with zero columns to the stored width."""
        if rows.shape[1] == self._stored_width:
            return rows
        out = np.zeros((rows.shape[0], self._stored_width), dtype=np.float32)
        out[:, : rows.shape[1]] = rows
        return out

    # --------------------------------------------------------------------------- building
    @classmethod
    def from_rows(cls, rows, dtype: str) -> KeyMatrix:
        """Rows of any float dtype, stored in ``dtype`` (float16 rounds to nearest)."""
        rows = np.asarray(rows)
        if rows.ndim != 2:
            raise ValueError(f"key rows must be a 2-D array, got shape {rows.shape}")
        keys = cls(rows.shape[1], dtype)
        keys.extend(rows[start : start + ROW_CHUNK] for start in range(0, len(rows), ROW_CHUNK))
        return keys

    @classmethod
    def from_stored(cls, stored: np.ndarray) -> KeyMatrix:
        """Rows already in a storage dtype (e.g. loaded from disk), copied byte for byte."""
        stored = np.asarray(stored)
        if stored.ndim != 2:
            raise ValueError(f"key rows must be a 2-D array, got shape {stored.shape}")
        keys = cls(stored.shape[1], stored.dtype.name)
        n, width = stored.shape
        nbytes = n * keys._stored_width * keys.dtype.itemsize
        if nbytes:
            codes = keys._index.codes
            codes.resize(nbytes)
            raw = _faiss().rev_swig_ptr(codes.data(), nbytes)
            target = raw.view(keys.dtype).reshape(n, keys._stored_width)
            for start in range(0, n, ROW_CHUNK):  # chunks: a memory-mapped file pages in once
                target[start : start + ROW_CHUNK, :width] = stored[start : start + ROW_CHUNK]
            target[:, width:] = 0
            keys._index.ntotal = n
        keys._refresh_view()
        return keys

    @classmethod
    def mapped(
        cls, path, offset: int, rows: int, width: int, stored_width: int, dtype: str
    ) -> KeyMatrix:
        """The (rows, stored_width) ``dtype`` rows stored in the file ``path`` from byte
        ``offset`` (a row file of the archive index), scanned where they lie: no copy.

        The file is mapped privately (copy on write): its pages are the page cache's, shared by
        every process mapping it, except the one page where a FAISS header (as FAISS writes one
        for this index) is written over the end of the file's own header, just before the rows.
        FAISS then reads the index from that memory without copying the rows
        (``ZeroCopyIOReader``). ``offset`` must leave room for that header."""
        import mmap

        faiss = _faiss()
        keys = cls(width, dtype)
        if stored_width < width:
            raise ValueError(f"stored rows are {stored_width} wide, narrower than {width}")
        header = _faiss_header(keys.dtype, stored_width, rows)
        if len(header) > offset:
            raise ValueError(f"{path}: {offset} header bytes leave no room for FAISS's header")
        nbytes = rows * stored_width * keys.dtype.itemsize
        with open(path, "rb") as handle:
            if rows == 0:
                return keys
            mapping = mmap.mmap(handle.fileno(), offset + nbytes, access=mmap.ACCESS_COPY)
        memory = np.frombuffer(mapping, dtype=np.uint8, count=offset + nbytes)
        memory[offset - len(header) : offset] = np.frombuffer(header, dtype=np.uint8)
        start = memory[offset - len(header) :]
        reader = faiss.ZeroCopyIOReader(faiss.swig_ptr(start), len(header) + nbytes)
        index = faiss.read_index(reader, faiss.IO_FLAG_MMAP_IFC)
        if index.codes.is_owned or int(index.ntotal) != rows or int(index.d) != stored_width:
            raise ValueError(f"{path}: FAISS did not map the rows in place")
        keys._index = index
        keys._mapping = memory  # the rows (and the mapping under them) live as long as the keys
        view = memory[offset:].view(keys.dtype).reshape(rows, stored_width)[:, :width]
        view.flags.writeable = False
        keys._array = view
        return keys

    @property
    def stored_rows(self) -> np.ndarray:
        """The rows as FAISS holds them, padding columns included ((n, stored width), no copy):
        what a row file of the archive index stores, so that ``mapped`` can scan it."""
        n = len(self)
        if n == 0:
            return np.empty((0, self._stored_width), dtype=self.dtype)
        raw = _faiss().rev_swig_ptr(self._index.codes.data(), self.nbytes)
        return raw.view(self.dtype).reshape(n, self._stored_width)

    def extend(self, chunks) -> None:
        """Append row chunks (each (m, width), any float dtype); only before the rows are used."""
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype=np.float32)
            if chunk.ndim != 2 or chunk.shape[1] != self.width:
                raise ValueError(f"key rows have shape {chunk.shape}; expected (m, {self.width})")
            if len(chunk):
                self._index.add(self._padded(chunk))
        self._refresh_view()

    def _refresh_view(self) -> None:
        n = int(self._index.ntotal)
        if n == 0:
            self._array = np.empty((0, self.width), dtype=self.dtype)
            return
        nbytes = n * self._stored_width * self.dtype.itemsize
        memory = _BorrowedMemory(self._index, int(self._index.codes.data()), nbytes, self.width)
        view = np.asarray(memory).view(self.dtype).reshape(n, self._stored_width)
        view = view[:, : self.width]  # the padding stays hidden
        view.flags.writeable = False
        self._array = view

    # ---------------------------------------------------------------------------- reading
    @property
    def array(self) -> np.ndarray:
        """The rows as a read-only (n, width) ndarray in the storage dtype (no copy)."""
        return self._array

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def nbytes(self) -> int:
        """Bytes held for the rows (padding included)."""
        return len(self) * self._stored_width * self.dtype.itemsize

    @classmethod
    def owning(cls, array) -> KeyMatrix | None:
        """A KeyMatrix over the same memory when ``array`` is the full ``array`` of one (the rows
        are then not copied again), else None."""
        if not isinstance(array, np.ndarray) or array.ndim != 2:
            return None
        base = array
        while isinstance(base, np.ndarray):
            base = base.base
        if not isinstance(base, _BorrowedMemory) or array.dtype.name not in STORAGE_DTYPES:
            return None
        index = base.owner
        address, _ = base.__array_interface__["data"]
        if (
            array.ctypes.data != address
            or array.shape != (index.ntotal, base.width)
            or array.strides != (index.d * array.itemsize, array.itemsize)
        ):
            return None
        keys = cls.__new__(cls)
        keys.dtype, keys.width = array.dtype, int(base.width)
        keys._index, keys._array = index, array
        return keys

    def rows(self, rows) -> np.ndarray:
        """The given rows as float32 (a copy)."""
        return self._array[rows].astype(np.float32)

    def top_k(
        self, query_vector, k: int, allowed=None, threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """(inner products, rows), best first, of the at most k rows with the largest inner
        product with ``query_vector``; ``allowed``: boolean mask over the rows (None = all).
        ``threads`` > 1 splits the rows into up to that many contiguous ranges (each of at least
        SPLIT_MIN_BYTES) scanned at once, one core each, and merges their top k: the best k of
        the union of every range's best k are the best k of all rows."""
        query = np.ascontiguousarray(np.reshape(query_vector, (1, -1)), dtype=np.float32)
        if query.shape[1] != self.width:
            raise ValueError(
                f"the query vector has {query.shape[1]} entries but the keys are {self.width} wide"
            )
        k = min(int(k), len(self))
        if k <= 0:
            return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)
        query = self._padded(query)
        if allowed is None:
            return self._scan(query, k, None, threads)
        mask = np.asarray(allowed, dtype=bool)
        if mask.shape != (len(self),):
            raise ValueError(f"the allowed mask has shape {mask.shape}; expected ({len(self)},)")
        count = int(mask.sum())
        if count == 0:
            return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)
        # A mask makes FAISS test every row (a virtual call and an unpredictable branch each):
        # 1M x 99 float16 rows, 38% allowed, scanned in 49 ms against 34 without a mask. So the
        # rows are scanned without it for more than k best rows, and the disallowed dropped:
        # with k + (disallowed rows) of them at least k allowed ones remain (the own study's
        # exclusion: always); otherwise (filters) twice the expected number are asked for and
        # the masked scan runs only when fewer than k allowed ones came back.
        excluded = len(self) - count
        certain = k + excluded <= OVERSCAN_ROWS
        wide = k + excluded if certain else 2 * k * len(self) // count + 16
        if wide <= OVERSCAN_ROWS:
            scores, rows = self._scan(query, min(wide, len(self)), None, threads)
            keep = mask[rows]
            if certain or int(keep.sum()) >= min(k, count):
                return scores[keep][:k], rows[keep][:k]
        return self._scan(query, k, mask, threads)

    def _scan(self, query, k: int, mask, threads: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's top k of the (padded) query over the rows ``mask`` allows (None = all), split
        into contiguous ranges scanned by ``threads`` threads when the rows are large enough."""
        faiss = _faiss()
        bitmap, bits = None, None
        if mask is not None:
            bits = np.packbits(mask, bitorder="little")
            bitmap = faiss.IDSelectorBitmap(len(self), faiss.swig_ptr(bits))
        parts = max(1, min(int(threads), self.nbytes // SPLIT_MIN_BYTES, len(self)))
        bounds = np.linspace(0, len(self), parts + 1).astype(np.int64)
        selectors, alive = [], [bits]  # FAISS's selectors point at each other: keep all alive
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            if parts == 1:
                selectors.append(bitmap)
                break
            ranged = faiss.IDSelectorRange(int(start), int(stop))
            alive.append(ranged)
            selectors.append(ranged if bitmap is None else faiss.IDSelectorAnd(ranged, bitmap))

        def scan(selector):
            params = None
            if selector is not None:
                params = faiss.SearchParameters()
                params.sel = selector
            return self._index.search(query, k, params=params)

        previous = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # this thread only: one query scans on one core; a team
        try:  # of OpenMP threads only waits on each other (badly, on a busy machine)
            others = [_scan_pool(parts).submit(scan, sel) for sel in selectors[1:]]
            results = [scan(selectors[0])] + [future.result() for future in others]
        finally:
            faiss.omp_set_num_threads(previous)
        scores = np.concatenate([found[0] for found, _ in results])
        rows = np.concatenate([ids[0] for _, ids in results]).astype(np.int64)
        keep = rows >= 0  # FAISS pads with -1 when fewer rows pass the mask
        scores, rows = scores[keep], rows[keep]
        if parts > 1:
            order = np.lexsort((rows, -scores))[:k]
            scores, rows = scores[order], rows[order]
        return scores, rows

    def inner_products(self, query_vector) -> np.ndarray:
        """(n,) float32 inner products of every row with ``query_vector`` (a full scan)."""
        query = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if self.dtype == np.float32:
            return self._array @ query
        out = np.empty(len(self), dtype=np.float32)
        with one_blas_thread():  # small products: more BLAS threads only wait on each other
            for start in range(0, len(self), ROW_CHUNK):
                block = self._array[start : start + ROW_CHUNK].astype(np.float32)
                np.matmul(block, query, out=out[start : start + len(block)])
        return out


def rank_exactly(features: KeyMatrix, vector, offset, mask, candidates, k, image_ids, threads=1):
    """(rows, scores, standing), best first, ties by image id: the exact top k of the eligible
    rows; ``standing[i]``: how many eligible rows score at least ``scores[i]`` (the row itself and
    its ties included), exact although only the top k are scanned for."""
    if k == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, np.empty(0), empty
    allowed = None if candidates == len(mask) else mask
    # one row more than wanted shows whether a tie crosses the cut (then the lowest ids must win)
    found, rows = features.top_k(vector, k + 1, allowed, threads)
    if len(found) > k and found[k - 1] == found[k]:
        scores = np.where(mask, features.inner_products(vector), -np.inf)
        kth = -np.partition(-scores, k - 1)[k - 1]
        rows = np.flatnonzero(scores >= kth)  # every row tied with the k-th
        found = scores[rows]
    # every eligible row outside ``found`` scores below the k-th best (strictly: no tie crosses
    # the cut any more), so counting within ``found`` counts among all eligible rows
    standing = len(found) - np.searchsorted(np.sort(found), found, side="left")
    found = found.astype(np.float64) + offset
    order = np.lexsort((image_ids[rows], -found))[:k]
    return rows[order], found[order], standing[order]
