"""Fitted geometries and gallery features, computed once and kept in memory and on disk.

A gallery's features depend on the encoder, the archive, the anchor set version and the geometry
(and, for posterior geometries, the broad prior). The cache key hashes all of them, so any change of
archive or anchor set makes a new key: stale features are never served.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from chexretrieve.cache import cache_folder
from chexretrieve.geometry import GEOMETRY_CHOICES as _GEOMETRY_CHOICES
from chexretrieve.geometry import GeometryName, fit_geometry, geometry_name
from chexretrieve.seal import SealError
from chexretrieve.search.feature_files import (
    FeatureFileRejected,
    read_feature_file,
    write_feature_file,
)
from chexretrieve.search.scoring import ROW_CHUNK, KeyMatrix, check_storage_dtype, one_blas_thread

logger = logging.getLogger(__name__)

#: every geometry a request may name (search spelling; posterior_<kind> is accepted as well)
GEOMETRY_CHOICES = _GEOMETRY_CHOICES
#: a parsed geometry name: kind, posterior, name (see chexretrieve.geometry.names)
GeometrySpec = GeometryName


def parse_geometry(name: str) -> GeometrySpec:
    """'softmax' -> softmax; 'gaussian_posterior' or 'posterior_gaussian' -> adapted Gaussian;
    anything else: ValueError listing the names (chexretrieve.geometry.geometry_name)."""
    return geometry_name(name)


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\x00")
    return h.hexdigest()[:24]


class FeatureCache:
    """LRU memory caches of fitted geometries and of gallery features (backed by .npy files).

    Safe to share between threads (a server's concurrent searches): the LRUs change under a lock,
    work is done outside it. Geometries are small and only held in memory (a refit can take
    seconds), so they get their own LRU, ``GEOMETRIES_PER_ENTRY`` times larger than the one for
    feature blocks, which are large and reload from disk.

    Feature blocks are ``KeyMatrix`` objects in ``storage_dtype`` ("float32" or "float16"), the
    dtype of their cache files too. Plain-layout geometries (cosine, ITI), whose features are the
    embeddings themselves, share the gallery's embedding rows instead of holding a copy.
    """

    GEOMETRIES_PER_ENTRY = 8

    def __init__(
        self,
        folder: Path | None,
        entries: int,
        index_entries: int = 4,
        storage_dtype: str = "float32",
    ):
        self.folder = folder
        self.storage_dtype = check_storage_dtype(storage_dtype)
        self.entries = max(1, entries)
        self.index_entries = max(1, index_entries)  # ANN indexes are the largest objects held
        self._memory: OrderedDict[str, object] = OrderedDict()  # feature blocks
        self._geometries: OrderedDict[str, object] = OrderedDict()
        self._indexes: OrderedDict[str, object] = OrderedDict()  # ANN indexes, memory only
        self._index_builds: dict[str, threading.Thread] = {}  # key -> background build
        self.index_failures: dict[str, str] = {}  # key -> why its build failed
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Lock] = {}  # key -> lock held while it is computed
        self.computed = 0  # gallery feature blocks computed (not loaded): tests and logs read it
        self.extended = 0  # of those, blocks extended from the previous archive's (new rows only)
        # why cached files were not served, newest last (tests and logs; the last 100 kept)
        self.rejected: list[str] = []
        self._geometry_inputs: dict[str, dict] = {}  # geometry key -> what it was fitted from
        # geometry key -> (gallery fingerprint, feature key) of the newest gallery it scored, and
        # fingerprint -> (image ids, SHA-256 of the embedding rows) of the last few galleries: an
        # archive that only grew gets features for its new rows only. No embedding or feature
        # array is held here (the features are recalled from the LRU, if still there)
        self._latest: dict[str, tuple[str, str]] = {}
        self._galleries: OrderedDict[str, tuple[np.ndarray, str]] = OrderedDict()
        self._write_warned = False

    def _recall(self, lru: OrderedDict, key: str) -> object | None:
        with self._lock:
            value = lru.get(key)
            if value is not None:
                lru.move_to_end(key)
            return value

    @contextlib.contextmanager
    def _computing(self, key: str):
        """One thread computes ``key`` while the others asking for it wait, then recall it (a
        reloaded gallery must not make twenty concurrent searches fit and score it twenty times)."""
        with self._lock:
            pending = self._pending.setdefault(key, threading.Lock())
        with pending:
            yield
        with self._lock:
            if self._pending.get(key) is pending:
                del self._pending[key]

    def _remember(self, lru: OrderedDict, key: str, value: object, capacity: int) -> None:
        with self._lock:
            lru[key] = value
            lru.move_to_end(key)
            while len(lru) > capacity:
                lru.popitem(last=False)

    def geometry(
        self,
        spec: GeometrySpec,
        anchors: np.ndarray | None,
        anchors_hash: str,
        inv_temperature: float,
        prior: Callable[[], tuple[str, np.ndarray]] | None,
        seed: int,
    ):
        """The fitted geometry (fitting is deterministic for the seed, so only memory-cached)."""
        prior_hash, prior_matrix = ("", None)
        if spec.posterior:
            if prior is None:
                raise ValueError(
                    f"geometry {spec.name!r} needs the broad clinical prior, which is not available"
                )
            prior_hash, prior_matrix = prior()
        key = "geom:" + _digest(spec.name, anchors_hash, float(inv_temperature), prior_hash, seed)
        with self._lock:
            self._geometry_inputs[key] = {
                "geometry": spec.name,
                "anchors_sha": anchors_hash,
                "inv_temperature": float(inv_temperature),
                "prior_sha": prior_hash,
                "fit_seed": int(seed),
            }
        cached = self._recall(self._geometries, key)
        if cached is not None:
            return cached, key
        with self._computing(key):
            cached = self._recall(self._geometries, key)  # fitted while this one waited
            if cached is not None:
                return cached, key
            options = {"seed": seed} if spec.kind in ("gmm", "movmf") else {}
            # small dense algebra (an SVD of tens of anchors): a second BLAS thread only waits
            # for a core (0.5 s instead of 2 ms for the softmax's SVD on a busy 2-core machine)
            with one_blas_thread():
                geom = fit_geometry(
                    spec.kind,
                    None if spec.kind == "cosine" else anchors,
                    inv_temperature=inv_temperature,
                    prior=prior_matrix,
                    **options,
                )
            self._remember(self._geometries, key, geom, self.GEOMETRIES_PER_ENTRY * self.entries)
        return geom, key

    def gallery_features(
        self,
        geometry,
        geometry_key: str,
        fingerprint: str,
        embeddings,
        image_ids: np.ndarray | None = None,
        context: dict | None = None,
    ) -> KeyMatrix:
        """Features of every gallery row under the geometry, a ``KeyMatrix`` in the storage dtype:
        memory, then a verified file on disk (chexretrieve.search.feature_files), then computed
        (for an archive that only grew since the last call: extended by its new rows).
        ``image_ids``: the gallery's ids (row order); ``context``: further inputs recorded with
        the file (encoder, archive revision)."""
        parts = (geometry_key, fingerprint)
        if self.storage_dtype != "float32":  # float32 keeps the cache file names it always had
            parts += (self.storage_dtype,)
        key = "feat:" + _digest(*parts)
        cached = self._recall(self._memory, key)
        if cached is not None:
            return cached
        with self._lock:
            geometry_inputs = dict(self._geometry_inputs.get(geometry_key, {}))
        inputs = {
            **geometry_inputs,
            **(context or {}),
            "geometry_key": geometry_key,
            "gallery_fingerprint": fingerprint,
            "rows": int(len(embeddings)),
            "storage_dtype": self.storage_dtype,
        }
        with self._computing(key):
            features = self._load_or_compute_features(
                key, geometry, embeddings, inputs, geometry_key, image_ids
            )
        if image_ids is not None and geometry.layout != "plain":
            self._note_gallery(fingerprint, image_ids, embeddings)
            with self._lock:
                self._latest[geometry_key] = (fingerprint, key)
        return features

    def _note_gallery(self, fingerprint: str, image_ids, embeddings) -> None:
        """Keep (ids, digest of the rows) of this gallery for a later extension (3 galleries)."""
        with self._lock:
            if fingerprint in self._galleries:
                self._galleries.move_to_end(fingerprint)
                return
        ids = np.array(image_ids, dtype=np.int64, copy=True)
        digest = _rows_digest(embeddings, len(ids))
        with self._lock:
            self._galleries[fingerprint] = (ids, digest)
            while len(self._galleries) > 3:
                self._galleries.popitem(last=False)

    def gallery_index(self, geometry, geometry_key: str, fingerprint: str, features, kind: str):
        """The ``chexretrieve.ann`` index of ``kind`` over the gallery features, or None while it
        is built in a background thread (started by the first call; memory only). A build that
        fails is logged once and not retried for that archive: its searches rank exactly."""
        key = "index:" + _digest(geometry_key, fingerprint, kind)
        cached = self._recall(self._indexes, key)
        if cached is not None:
            return cached
        with self._lock:
            if key in self._index_builds or key in self.index_failures:
                return None
            build = threading.Thread(
                target=self._build_index,
                args=(key, geometry, features, kind),
                name=f"chexretrieve-index-{kind}",
                daemon=True,
            )
            self._index_builds[key] = build
        build.start()
        return None

    def _build_index(self, key: str, geometry, features, kind: str) -> None:
        try:
            from chexretrieve.ann import AnnConfig, build_index  # FAISS: only when asked for

            index = build_index(geometry, features, config=AnnConfig(kind=kind))
            self._remember(self._indexes, key, index, self.index_entries)
        except Exception as exc:  # noqa: BLE001 - the searches go on exactly; the reason is kept
            self.index_failures[key] = f"{type(exc).__name__}: {exc}"
            logger.warning("building a %s index failed (%s); searches rank exactly", kind, exc)
        finally:
            with self._lock:
                self._index_builds.pop(key, None)

    def wait_for_indexes(self, timeout_s: float | None = None) -> None:
        """Block until the index builds started so far have ended (tests, benchmarks, warm-up)."""
        with self._lock:
            builds = list(self._index_builds.values())
        for build in builds:
            build.join(timeout_s)

    def _load_or_compute_features(
        self, key: str, geometry, embeddings, inputs: dict, geometry_key: str, image_ids
    ) -> KeyMatrix:
        cached = self._recall(self._memory, key)  # computed while this one waited
        if cached is not None:
            return cached
        if geometry.layout == "plain":  # cosine, ITI: the features are the embeddings
            features = KeyMatrix.owning(embeddings)
            if features is None or features.dtype != self.storage_dtype:
                features = KeyMatrix.from_rows(embeddings, self.storage_dtype)
            self._remember(self._memory, key, features, self.entries)
            return features
        path = self.folder / f"{key[5:]}.npy" if self.folder else None
        shape = (len(embeddings), int(geometry.feature_dim))
        features = None
        if path is not None:
            try:
                stored = read_feature_file(path, inputs, shape, self.storage_dtype)
                if stored is not None:
                    features = KeyMatrix.from_stored(stored)  # copied out of the file's bytes
                del stored
            except FeatureFileRejected as why:
                self.rejected = [*self.rejected[-99:], f"{path.name}: {why}"]
                logger.warning("cached features %s not used: %s; recomputing", path, why)
        if features is None:
            features = self._extended(geometry, geometry_key, embeddings, image_ids)
            if features is None:
                features = KeyMatrix(geometry.feature_dim, self.storage_dtype)
                features.extend(
                    geometry.features(_unit_float32(embeddings[start : start + ROW_CHUNK]))
                    for start in range(0, len(embeddings), ROW_CHUNK)
                )
            self.computed += 1
            if path is not None:
                self._save(path, features, inputs)
        self._remember(self._memory, key, features, self.entries)
        return features

    def _extended(self, geometry, geometry_key: str, embeddings, image_ids) -> KeyMatrix | None:
        """The previous gallery's features plus those of the new rows, when the archive only
        grew (its rows are a prefix of this one's: the same ids, embedding rows with the same
        SHA-256) and those features are still in memory, else None."""
        if image_ids is None:
            return None
        with self._lock:
            latest = self._latest.get(geometry_key)
            old = self._galleries.get(latest[0]) if latest else None
        if latest is None or old is None:
            return None
        old_features = self._recall(self._memory, latest[1])
        old_ids, old_digest = old
        m = len(old_ids)
        ids = np.asarray(image_ids)
        if old_features is None or not 0 < m < len(ids) or len(old_features) != m:
            return None
        if not np.array_equal(ids[:m], old_ids) or _rows_digest(embeddings, m) != old_digest:
            return None
        features = KeyMatrix.from_stored(old_features.array)
        features.extend(
            geometry.features(_unit_float32(embeddings[start : start + ROW_CHUNK]))
            for start in range(m, len(embeddings), ROW_CHUNK)
        )
        self.extended += 1
        return features

    def _save(self, path: Path, features: KeyMatrix, inputs: dict) -> None:
        """Persist an entry; a folder that cannot take it (read-only, full, a folder where the
        file goes) costs one warning, and the features stay in memory for this process."""
        try:
            write_feature_file(path, features.array, inputs)
        except (OSError, SealError) as exc:
            if not self._write_warned:
                self._write_warned = True
                logger.warning(
                    "the feature cache %s cannot be written (%s); features are kept in memory "
                    "only, so searches go on but recompute after a restart (make the folder "
                    "writable, free space, or set SearchConfig.feature_cache_dir)",
                    path.parent,
                    getattr(exc, "strerror", None) or exc,
                )


def _rows_digest(embeddings, n: int) -> str:
    """SHA-256 of the first ``n`` embedding rows as stored (dtype and width included)."""
    digest = hashlib.sha256(f"{np.asarray(embeddings).dtype}|{embeddings.shape[1]}|".encode())
    for start in range(0, n, ROW_CHUNK):
        digest.update(np.ascontiguousarray(embeddings[start : min(n, start + ROW_CHUNK)]).tobytes())
    return digest.hexdigest()


def _unit_float32(rows: np.ndarray) -> np.ndarray:
    """Embedding rows as float32; rows stored in float16 are renormalised (rounding moved them
    off the unit sphere by up to ~5e-4)."""
    out = np.asarray(rows, dtype=np.float32)
    if np.asarray(rows).dtype != np.float32:
        out = out / np.linalg.norm(out, axis=1, keepdims=True)
    return out


def default_cache_folder() -> Path:
    """The search features' folder under the one cache root (chexretrieve.cache)."""
    return cache_folder("features")
