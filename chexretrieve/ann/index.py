"""FAISS indexes over a geometry's gallery features: exact, HNSW and IVF.

Every geometry scores ``query_vectors(fq) @ fk.T + query_offsets(fq)[:, None]``
(``chexretrieve.geometry.base``). The per-query offset never changes a query's ranking, so ranking
a gallery is maximum-inner-product search (MIPS) of the query vector against the key vectors fk
(the cached features themselves).

``exact``
    ``IndexFlatIP`` over the key vectors: the same ranking as the matmul, blocked and threaded.
``hnsw`` / ``ivf`` (approximate)
    Graph and inverted-file indexes are built for Euclidean neighbours, so the search is mapped to
    one. For the quadratic layout ([z, −½‖z‖²], query [z_q, 1]) the score is −½‖z_q − z_k‖² plus
    a query constant: the nearest z is the best key, and z alone is indexed. For the other layouts
    each key x gets one more coordinate √(M² − ‖x‖²), M the largest key norm, and each query a 0:
    then ‖q̃ − x̃‖² = ‖q‖² + M² − 2 qᵀx, so the nearest augmented key has the largest inner product
    (the reduction of maximum inner product to nearest-neighbour search; Bachrach et al. 2014).
    Candidates are re-scored exactly against the key vectors, so returned scores are always the
    inner products qᵀfk, whatever the index.

The search effort (HNSW ``efSearch``, IVF ``nprobe``) is tuned at build time unless set: it grows
until recall@k against the exact ranking reaches ``AnnConfig.target_recall`` on a sample of gallery
rows used as queries (their own row excluded), then is multiplied by ``AnnConfig.effort_margin``
because a gallery row is an easier query than an unseen image (the graph was built around it).
Recall counts ties: near-duplicate images often score equal to float32 precision, and any of them
is a correct k-th neighbour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from chexretrieve.ann.config import AnnConfig

#: HNSW efSearch values tried by tuning, in order
EF_STEPS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
#: gallery rows scored per block by the numpy exact search (bounds temporary memory)
EXACT_BLOCK = 65536


def _faiss():
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency
        raise ValueError(
            "the approximate search needs FAISS; install it with pip install faiss-cpu"
        ) from None
    return faiss


@dataclass(frozen=True)
class BuildStats:
    # seconds spent building (adding vectors, training IVF)
    build_s: float
    # seconds spent tuning the search effort (0 when it was given)
    tune_s: float
    # recall@tune_k measured while tuning (None when the effort was given)
    tuned_recall: float | None


class GalleryIndex:
    """A searchable index over one geometry's gallery features; build it with ``build_index``."""

    def __init__(self, kind, faiss_index, keys, space, layout, config, search_effort) -> None:  # noqa: ANN001
        self.kind: str = kind
        self.config: AnnConfig = config
        self.layout: str = layout
        self._index = faiss_index
        self._keys = keys  # the caller's features (not copied): exact re-scoring of candidates
        self._space = space  # "ip", "l2-z" (quadratic: z only) or "l2-augmented"
        self.search_effort = search_effort
        self.stats = BuildStats(0.0, 0.0, None)

    @property
    def size(self) -> int:
        return int(self._keys.shape[0])

    @property
    def dim(self) -> int:
        """Width of the key (and query) vectors."""
        return int(self._keys.shape[1])

    def memory_bytes(self) -> int:
        """Bytes FAISS holds for this index (vectors, graph links, lists); keys not included."""
        faiss = _faiss()
        writer = faiss.VectorIOWriter()
        faiss.write_index(self._index, writer)
        return int(writer.data.size())

    # ------------------------------------------------------------------------------ search
    def search(self, query_vectors, k: int, allowed=None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (n, k'), best first: the k' = min(k, candidates) keys with the
        largest inner product qᵀfk. ``allowed``: optional boolean mask over gallery rows (filters);
        an approximate index searches a selective mask (at most ``AnnConfig.exact_filter_rows``
        rows) exactly, and any query it returns fewer than k' rows for is searched again exactly."""
        queries = self._check_queries(query_vectors)
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        mask = None
        limit = self.size
        if allowed is not None:
            mask = np.asarray(allowed, dtype=bool).reshape(-1)
            if mask.shape[0] != self.size:
                raise ValueError(
                    f"the allowed mask has {mask.shape[0]} entries but the index holds "
                    f"{self.size} gallery rows"
                )
            limit = int(mask.sum())
        k = min(int(k), limit)
        if k == 0:
            empty = np.empty((queries.shape[0], 0))
            return empty.astype(np.float32), empty.astype(np.int64)
        if mask is not None and self.kind != "exact" and limit <= self.config.exact_filter_rows:
            return self._exact_subset(queries, k, np.flatnonzero(mask))
        params = self._params(mask, k)
        if self._space == "ip":
            scores, rows = self._index.search(queries, k, params=params)
            return scores, rows.astype(np.int64)
        searched = queries[:, :-1] if self._space == "l2-z" else _with_zero_column(queries)
        _, rows = self._index.search(np.ascontiguousarray(searched), k, params=params)
        scores, rows = self._rescore(queries, rows.astype(np.int64))
        short = np.flatnonzero((rows < 0).any(axis=1))
        if len(short):
            subset = np.flatnonzero(mask) if mask is not None else np.arange(self.size)
            scores[short], rows[short] = self._exact_subset(queries[short], k, subset)
        return scores, rows

    def _exact_subset(self, queries: np.ndarray, k: int, subset: np.ndarray):  # noqa: ANN202
        scores, positions = exact_top_k(queries, self._keys[subset], k)
        return scores, subset[positions]

    def search_features(self, geometry, fq, k: int, allowed=None) -> tuple[np.ndarray, np.ndarray]:
        """(geometry scores, rows) for query features ``fq``: inner products plus query offsets,
        equal to ``geometry.score(fq, features)`` on the rows returned."""
        scores, rows = self.search(geometry.query_vectors(fq), k, allowed)
        offsets = geometry.query_offsets(fq).astype(np.float32)
        return scores + offsets[:, None], rows

    def _check_queries(self, query_vectors) -> np.ndarray:
        queries = np.asarray(query_vectors)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(
                f"query vectors have shape {np.shape(query_vectors)} but the index holds "
                f"{self.dim}-wide keys; pass geometry.query_vectors(features) of the same geometry"
            )
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if not np.all(np.isfinite(queries)):
            raise ValueError("query vectors contain NaN or infinite values")
        return queries

    def _params(self, mask, k: int):  # noqa: ANN202
        faiss = _faiss()
        selector = None
        if mask is not None:
            bits = np.packbits(mask, bitorder="little")
            selector = faiss.IDSelectorBitmap(mask.shape[0], faiss.swig_ptr(bits))
            selector._bits = bits  # keep the buffer alive as long as the selector
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(self.search_effort, k))
        elif self.kind == "ivf":
            params = faiss.SearchParametersIVF(nprobe=self.search_effort)
        else:
            params = faiss.SearchParameters() if selector is not None else None
        if selector is not None:
            params.sel = selector
            params._selector = selector
        return params

    def _rescore(self, queries: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = rows >= 0
        gathered = self._keys[np.where(found, rows, 0)]
        scores = np.einsum("nkf,nf->nk", gathered.astype(np.float32), queries)
        scores = np.where(found, scores, -np.inf).astype(np.float32)
        order = np.argsort(-scores, axis=1, kind="stable")
        return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


def _with_zero_column(x: np.ndarray) -> np.ndarray:
    out = np.zeros((x.shape[0], x.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = x
    return out


def _squared_norms(keys: np.ndarray) -> np.ndarray:
    """‖x‖² of every key in float64, block by block (no float64 copy of all the keys)."""
    out = np.empty(keys.shape[0], dtype=np.float64)
    for start in range(0, keys.shape[0], EXACT_BLOCK):
        block = keys[start : start + EXACT_BLOCK].astype(np.float64)
        out[start : start + len(block)] = np.einsum("ij,ij->i", block, block)
    return out


def augmented_keys(keys: np.ndarray) -> np.ndarray:
    """Keys with √(M² − ‖x‖²) appended: every augmented key has norm M (see the module doc)."""
    norms2 = _squared_norms(keys)
    top = float(norms2.max()) if len(norms2) else 0.0
    out = np.empty((keys.shape[0], keys.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = keys
    out[:, -1] = np.sqrt(np.maximum(top - norms2, 0.0))
    return out


def build_index(geometry, features, kind: str | None = None, config: AnnConfig | None = None):
    """An index over ``features`` (the geometry's gallery features, (G, F)) for ranking by
    ``geometry``'s score. ``kind`` overrides ``config.kind`` ("exact", "hnsw", "ivf")."""
    config = config or AnnConfig()
    if kind is not None and kind != config.kind:
        config = AnnConfig(**{**config.__dict__, "kind": kind})
    keys = geometry.key_vectors(features)
    if keys.shape[0] == 0:
        raise ValueError("the gallery is empty; ingest images before building an index")
    if keys.dtype not in (np.float16, np.float32):
        keys = np.ascontiguousarray(keys, dtype=np.float32)
    # float16 rows (SearchConfig.storage_dtype) are kept as they are for re-scoring candidates,
    # not copied to float32: 1M softmax features hold 0.2 GB instead of 0.4
    if not all(
        np.isfinite(keys[s : s + EXACT_BLOCK]).all() for s in range(0, len(keys), EXACT_BLOCK)
    ):
        raise ValueError("gallery features contain NaN or infinite values; recompute them")
    faiss = _faiss()
    if config.threads:
        faiss.omp_set_num_threads(config.threads)
    started = time.perf_counter()
    if config.kind == "exact":
        index = faiss.IndexFlatIP(keys.shape[1])
        for start in range(0, len(keys), EXACT_BLOCK):
            index.add(np.ascontiguousarray(keys[start : start + EXACT_BLOCK], dtype=np.float32))
        result = GalleryIndex("exact", index, keys, "ip", geometry.layout, config, 0)
        result.stats = BuildStats(time.perf_counter() - started, 0.0, None)
        return result
    if geometry.layout == "quadratic":
        space, vectors = "l2-z", np.ascontiguousarray(keys[:, :-1], dtype=np.float32)
    else:
        space, vectors = "l2-augmented", augmented_keys(keys)
    if config.kind == "hnsw":
        index = faiss.IndexHNSWFlat(vectors.shape[1], config.hnsw_m)
        index.hnsw.efConstruction = config.ef_construction
        index.add(vectors)
    else:
        # FAISS's k-means wants at least 39 training points per cell
        lists = config.ivf_lists or min(int(4 * np.sqrt(len(vectors))), len(vectors) // 39)
        lists = max(1, min(lists, len(vectors)))
        quantizer = faiss.IndexFlatL2(vectors.shape[1])
        index = faiss.IndexIVFFlat(quantizer, vectors.shape[1], lists)
        index.cp.seed = config.seed
        index.train(vectors)
        index.add(vectors)
        index.own_fields = True  # the index now frees its quantizer
        quantizer.this.disown()
    build_s = time.perf_counter() - started
    result = GalleryIndex(config.kind, index, keys, space, geometry.layout, config, 0)
    if config.search_effort:
        result.search_effort = config.search_effort
        result.stats = BuildStats(build_s, 0.0, None)
    else:
        started = time.perf_counter()
        recall = tune_search_effort(result, geometry)
        result.stats = BuildStats(build_s, time.perf_counter() - started, recall)
    return result


def tune_search_effort(index: GalleryIndex, geometry) -> float:
    """Raise the index's search effort until recall@k on sampled gallery queries reaches the
    target (or the largest step); returns the recall reached."""
    config = index.config
    rng = np.random.default_rng(config.seed)
    sample = np.sort(rng.choice(index.size, min(config.tune_queries, index.size), replace=False))
    queries = geometry.query_vectors(index._keys[sample].astype(np.float32))
    k = min(config.tune_k + 1, index.size)
    truth = exact_top_k(queries, index._keys, k)
    if index.kind == "hnsw":
        steps = [ef for ef in EF_STEPS if ef >= k] or [k]
    else:
        lists = index._index.nlist
        steps = sorted({min(lists, 2**i) for i in range(int(np.ceil(np.log2(lists))) + 1)})
    recall = 0.0
    for effort in steps:
        index.search_effort = effort
        _, found = index.search(queries, k)
        recall = recall_at_k(found, queries, index._keys, truth, config.tune_k, exclude=sample)
        if recall >= config.target_recall:
            break
    index.search_effort = min(int(np.ceil(index.search_effort * config.effort_margin)), steps[-1])
    return recall


def exact_top_k(query_vectors, keys, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) of the k largest inner products per query, best first, by blocked numpy
    matmul (ties: lower row first); the reference the approximate indexes are measured against."""
    queries = np.asarray(query_vectors, dtype=np.float32)
    keys = np.asarray(keys)
    k = min(int(k), keys.shape[0])
    best_scores = np.full((queries.shape[0], 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((queries.shape[0], 0), dtype=np.int64)
    for start in range(0, keys.shape[0], EXACT_BLOCK):
        block = queries @ keys[start : start + EXACT_BLOCK].astype(np.float32, copy=False).T
        take = min(k, block.shape[1])
        part = np.argpartition(-block, take - 1, axis=1)[:, :take]
        scores = np.concatenate([best_scores, np.take_along_axis(block, part, 1)], axis=1)
        rows = np.concatenate([best_rows, part + start], axis=1)
        order = np.lexsort((rows, -scores), axis=1)[:, :k]
        best_scores = np.take_along_axis(scores, order, 1)
        best_rows = np.take_along_axis(rows, order, 1)
    return best_scores, best_rows


def recall_at_k(found_rows, query_vectors, keys, truth, k: int, exclude=None) -> float:
    """Mean share of the true top k among the first k rows returned, counting ties: a returned
    row is a hit when its exact score reaches the k-th best exact score less float32 rounding
    (8·ε·‖q‖·max‖x‖). ``truth`` = ``exact_top_k(query_vectors, keys, k + 1)``; ``exclude``: one
    row per query (its own row) removed from both lists first."""
    found_rows = np.asarray(found_rows)
    queries = np.asarray(query_vectors, dtype=np.float64)
    keys = np.asarray(keys)
    true_scores, true_rows = truth
    largest_key = float(np.sqrt(_squared_norms(keys).max()))
    eps = float(np.finfo(np.float32).eps)
    total = 0.0
    for i in range(found_rows.shape[0]):
        found = [r for r in found_rows[i] if r >= 0 and (exclude is None or r != exclude[i])]
        keep = [j for j, r in enumerate(true_rows[i]) if exclude is None or r != exclude[i]]
        wanted = min(k, len(keep))
        if wanted == 0:
            total += 1.0
            continue
        kth = float(true_scores[i][keep[wanted - 1]])
        tolerance = 8 * eps * float(np.linalg.norm(queries[i])) * largest_key
        scores = keys[found[:wanted]].astype(np.float64) @ queries[i]
        total += min(int((scores >= kth - tolerance).sum()), wanted) / wanted
    return total / max(found_rows.shape[0], 1)
