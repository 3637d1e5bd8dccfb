"""Curation tools over built objects: embed a set (cached per version and encoder), measure an edit.

These functions take an encoder object, a store object and plain arrays, so they are testable with
small fakes; ``chexretrieve anchors embed`` / ``impact`` wire them to the real store and encoders.

Impact follows the evaluation protocol (``chexretrieve.evaluation.protocol``): for the set's finding
the queries are the query images labelled 1; keys labelled -1 (uncertain) are dropped, blank keys
count as negative, and a key is relevant when it is labelled 1. AUPRC is the mean per-query average
precision (``chexretrieve.metrics.average_precision_rows``, scikit-learn's definition).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chexretrieve.anchors.anchor_set import AnchorSet, AnchorSetError, anchor_cache_key
from chexretrieve.anchors.config import ImpactConfig

#: query rows scored at once (bounds the (rows, keys) score matrix)
QUERY_CHUNK = 512


@dataclass(frozen=True)
class EmbeddedAnchors:
    key: str
    content_hash: str
    encoder_id: str
    matrix: np.ndarray  # (n_sentences, d) float32 unit rows
    cached: bool  # True when read from the store, False when computed now


def embed_anchor_set(
    anchor_set: AnchorSet, encoder: Any, store: Any = None, refresh: bool = False
) -> EmbeddedAnchors:
    """Text embeddings of a set, read from / written to the store's cache when a store is given.

    The cache key is (set id, version, content hash, encoder id, the encoder's tokenizer
    fingerprint if any), so an edited file (new hash), another encoder or another vocabulary never
    reuses stale vectors.
    """
    encoder_id = encoder.encoder_id
    version = str(anchor_set.version)
    cache_key = anchor_cache_key(anchor_set.content_hash, encoder)
    if store is not None and not refresh:
        cached = store.get_anchor_embeddings(anchor_set.id, version, cache_key, encoder_id)
        if cached is not None and cached.shape[0] == len(anchor_set):
            return EmbeddedAnchors(
                anchor_set.key, anchor_set.content_hash, encoder_id, cached, cached=True
            )
    matrix = np.asarray(encoder.embed_texts(list(anchor_set.sentences)), dtype=np.float32)
    if matrix.shape[0] != len(anchor_set):
        raise AnchorSetError(
            f"encoder {encoder_id} returned {matrix.shape[0]} vectors for {len(anchor_set)} "
            f"sentences of {anchor_set.key}"
        )
    if store is not None and not getattr(store, "read_only", False):  # serve never writes it
        store.register_encoder(encoder_id, int(encoder.embed_dim), float(encoder.inv_temperature))
        store.put_anchor_embeddings(anchor_set.id, version, cache_key, encoder_id, matrix)
    return EmbeddedAnchors(anchor_set.key, anchor_set.content_hash, encoder_id, matrix, False)


@dataclass(frozen=True)
class QueryChange:
    query: Any  # the query's id (or row index)
    overlap: float  # |top-k before ∩ top-k after| / k
    ap_before: float
    ap_after: float
    top_before: tuple  # key ids, best first
    top_after: tuple


@dataclass(frozen=True)
class ImpactReport:
    finding: str
    before: str  # id@version
    after: str
    geometry: str
    n_queries: int
    n_keys: int
    n_relevant_keys: int
    auprc_before: float
    auprc_after: float
    auprc_cosine: float  # the anchor-free reference on the same queries and keys
    mean_overlap: float  # mean top-k overlap over all queries
    top_k: int
    most_changed: tuple[QueryChange, ...]
    # 95 % bootstrap interval of the change (queries resampled with replacement, percentile
    # method); NaN when ImpactConfig.bootstrap is 0
    delta_low: float = float("nan")
    delta_high: float = float("nan")

    @property
    def delta(self) -> float:
        return self.auprc_after - self.auprc_before

    @property
    def settled(self) -> bool:
        """Whether the interval excludes no change (the edit measurably helps or hurts)."""
        return bool(self.delta_low > 0 or self.delta_high < 0)

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "most_changed"}
        out["delta"] = self.delta
        out["most_changed"] = [
            {**c.__dict__, "top_before": list(c.top_before), "top_after": list(c.top_after)}
            for c in self.most_changed
        ]
        return out


def _select(
    key_labels: np.ndarray, query_labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    key_labels = np.asarray(key_labels, dtype=float)
    query_labels = np.asarray(query_labels, dtype=float)
    key_rows = np.flatnonzero(key_labels != -1)
    query_rows = np.flatnonzero(query_labels == 1)
    relevant = key_labels[key_rows] == 1
    return key_rows, query_rows, relevant


def _ranked(
    geometry, fq: np.ndarray, fk: np.ndarray, relevant: np.ndarray, top_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: AP and the top-k key rows, scored in chunks."""
    from chexretrieve.metrics import average_precision_rows

    ap = np.empty(fq.shape[0])
    top = np.empty((fq.shape[0], min(top_k, fk.shape[0])), dtype=np.int64)
    for start in range(0, fq.shape[0], QUERY_CHUNK):
        scores = np.asarray(geometry.score(fq[start : start + QUERY_CHUNK], fk), dtype=np.float64)
        ap[start : start + len(scores)] = average_precision_rows(scores, relevant)
        order = np.argsort(-scores, axis=1, kind="stable")[:, : top.shape[1]]
        top[start : start + len(scores)] = order
    return ap, top


def measure_impact(
    before: AnchorSet,
    after: AnchorSet,
    encoder: Any,
    keys: np.ndarray,
    key_labels: np.ndarray,
    queries: np.ndarray,
    query_labels: np.ndarray,
    config: ImpactConfig | None = None,
    *,
    key_ids: Sequence | None = None,
    query_ids: Sequence | None = None,
    store: Any = None,
    progress: Callable[[str], None] | None = None,
) -> ImpactReport:
    """AUPRC of the set's finding before and after an edit, and the queries whose top-k moved most.

    ``keys`` (m, d) and ``queries`` (n, d) are unit image embeddings of ``encoder``; ``*_labels``
    are that finding's CheXpert labels (1 / 0 / -1 / NaN). ``*_ids`` name rows in the report.
    """
    from chexretrieve.geometry import fit_geometry

    config = config or ImpactConfig()
    if before.finding is None or before.finding != after.finding:
        raise AnchorSetError(
            f"impact compares two versions of one finding's set; got {before.key} "
            f"({before.name}) and {after.key} ({after.name})"
        )
    keys = np.asarray(keys, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    if len(keys) != len(key_labels) or len(queries) != len(query_labels):
        raise ValueError(
            f"{len(keys)} keys with {len(key_labels)} labels, {len(queries)} queries with "
            f"{len(query_labels)} labels: pass one label per embedding row"
        )
    key_ids = np.asarray(key_ids if key_ids is not None else np.arange(len(keys)))
    query_ids = np.asarray(query_ids if query_ids is not None else np.arange(len(queries)))
    key_rows, query_rows, relevant = _select(key_labels, query_labels)
    if not len(query_rows) or not relevant.any():
        raise ValueError(
            f"no usable labels for {before.finding}: {len(query_rows)} positive queries, "
            f"{int(relevant.sum())} positive keys; impact needs both"
        )
    inv_t = config.inv_temperature or float(encoder.inv_temperature)
    k = config.top_k
    results = {}
    for name, anchor_set in (("before", before), ("after", after), ("cosine", None)):
        if progress is not None:
            progress(name)
        if anchor_set is None:
            geometry = fit_geometry("cosine", None, inv_temperature=inv_t)
        else:
            anchors = embed_anchor_set(anchor_set, encoder, store).matrix
            geometry = fit_geometry(config.geometry, anchors, inv_temperature=inv_t)
        fk = geometry.features(keys[key_rows])
        fq = geometry.features(queries[query_rows])
        results[name] = _ranked(geometry, fq, fk, relevant, k)

    (ap_b, top_b), (ap_a, top_a) = results["before"], results["after"]
    width = top_b.shape[1]
    overlap = np.array([len(set(top_b[i]) & set(top_a[i])) / width for i in range(len(query_rows))])
    order = np.lexsort((-np.abs(ap_a - ap_b), overlap))[: config.show_queries]
    changes = tuple(
        QueryChange(
            query=_plain(query_ids[query_rows[i]]),
            overlap=float(overlap[i]),
            ap_before=float(ap_b[i]),
            ap_after=float(ap_a[i]),
            top_before=tuple(_plain(key_ids[key_rows[j]]) for j in top_b[i]),
            top_after=tuple(_plain(key_ids[key_rows[j]]) for j in top_a[i]),
        )
        for i in order
    )
    low, high = bootstrap_interval(ap_a - ap_b, config)
    return ImpactReport(
        finding=before.finding,
        before=before.key,
        after=after.key,
        geometry=config.geometry,
        n_queries=len(query_rows),
        n_keys=len(key_rows),
        n_relevant_keys=int(relevant.sum()),
        auprc_before=float(ap_b.mean()),
        auprc_after=float(ap_a.mean()),
        auprc_cosine=float(results["cosine"][0].mean()),
        mean_overlap=float(overlap.mean()),
        top_k=width,
        most_changed=changes,
        delta_low=low,
        delta_high=high,
    )


def bootstrap_interval(differences: np.ndarray, config: ImpactConfig) -> tuple[float, float]:
    """95 % percentile interval of the mean of per-query AP differences, the queries resampled
    with replacement ``config.bootstrap`` times (seeded); (NaN, NaN) without resamples."""
    values = np.asarray(differences, dtype=np.float64)
    if config.bootstrap == 0 or len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(config.bootstrap_seed)
    means = np.empty(config.bootstrap)
    for start in range(0, config.bootstrap, 256):  # bounded memory for large query sets
        count = min(256, config.bootstrap - start)
        picks = rng.integers(0, len(values), size=(count, len(values)))
        means[start : start + count] = values[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
