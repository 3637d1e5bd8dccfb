"""Score a task's queries against its keys with one fitted geometry, in memory-bounded batches.

A fitted geometry (``chexretrieve.geometry.fit_geometry``) exposes ``features(x)`` (per-item cached
statistics, computed once per gallery) and ``score(fq, fk)`` -> (n, m), higher = more similar. The
key features are computed once per call; queries are featurised and scored in batches so that at
most ``max_block_elements`` scores exist at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from chexretrieve.evaluation.protocol import RetrievalTask
from chexretrieve.metrics import average_precision_rows


class FittedGeometry(Protocol):
    def features(self, x: np.ndarray) -> Any: ...

    def score(self, fq: Any, fk: Any) -> np.ndarray: ...


def query_batch_size(n_keys: int, max_block_elements: int) -> int:
    """Queries per batch so that a (batch, n_keys) block fits in ``max_block_elements``."""
    if max_block_elements < 1:
        raise ValueError(f"max_block_elements must be positive, got {max_block_elements}")
    return max(1, int(max_block_elements // max(n_keys, 1)))


def task_average_precision(
    geometry: FittedGeometry,
    embeddings: np.ndarray,
    tasks: Sequence[RetrievalTask],
    *,
    max_block_elements: int = 4_000_000,
) -> list[np.ndarray]:
    """Per-query AP of every task under one geometry; key features shared across the tasks.

    The tasks may differ in their keys: features are computed for the union of their keys once, and
    each task reads its own columns of the scores.
    """
    if not tasks:
        return []
    key_union = np.unique(np.concatenate([t.key_index for t in tasks]))
    key_features = geometry.features(embeddings[key_union])
    results = []
    for task in tasks:
        columns = np.searchsorted(key_union, task.key_index)
        full_width = len(columns) == len(key_union)
        batch = query_batch_size(len(key_union), max_block_elements)
        ap = np.zeros(task.n_queries, dtype=np.float64)
        for start in range(0, task.n_queries, batch):
            rows = slice(start, min(start + batch, task.n_queries))
            q_features = geometry.features(embeddings[task.query_index[rows]])
            scores = np.asarray(geometry.score(q_features, key_features), dtype=np.float64)
            if not full_width:
                scores = scores[:, columns]
            relevance = task.relevance(rows)
            if task.exclude_self:
                scores, relevance = _exclude_self(scores, relevance, task, rows)
            ap[rows] = average_precision_rows(scores, relevance)
        results.append(ap)
    return results


def _exclude_self(
    scores: np.ndarray, relevance: np.ndarray, task: RetrievalTask, rows: slice
) -> tuple[np.ndarray, np.ndarray]:
    """Push each query's own key to the bottom as non-relevant (exact removal for AP)."""
    order = np.argsort(task.key_index)
    sorted_keys = task.key_index[order]
    queries = task.query_index[rows]
    pos = np.searchsorted(sorted_keys, queries)
    pos_clipped = np.minimum(pos, len(sorted_keys) - 1)
    found = sorted_keys[pos_clipped] == queries
    if found.any():
        scores = scores.copy()
        relevance = relevance.copy()
        r = np.flatnonzero(found)
        c = order[pos_clipped[found]]
        scores[r, c] = -np.inf
        relevance[r, c] = False
    return scores, relevance


def fit_and_score(
    spec,
    anchors: np.ndarray,
    inv_temperature: float,
    embeddings: np.ndarray,
    tasks: Sequence[RetrievalTask],
    *,
    prior: np.ndarray | None = None,
    fitter=None,
    max_block_elements: int = 4_000_000,
    **extra: Any,
) -> list[np.ndarray] | str:
    """Per-query AP of every task under ``spec`` fitted to ``anchors``, or, when the geometry
    rejects this anchor set (a ValueError such as a degenerate latent subspace), its message."""
    from chexretrieve.evaluation.geometries import fit_spec

    try:
        geom = fit_spec(spec, anchors, inv_temperature, prior=prior, fitter=fitter, **extra)
        return task_average_precision(
            geom, embeddings, tasks, max_block_elements=max_block_elements
        )
    except ValueError as error:
        return f"{type(error).__name__}: {error}"
