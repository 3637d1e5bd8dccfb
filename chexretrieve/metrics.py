"""Average precision (AUPRC) of ranked key lists, one value per query, vectorised over queries.

The definition is scikit-learn's ``average_precision_score`` (the un-interpolated step integral of
the precision-recall curve), reproduced exactly, ties included:

* keys are ranked by score, highest first;
* keys with *equal* scores form one tie group; precision and recall are only evaluated at the end of
  each tie group (a tie group is one threshold of the precision-recall curve);
* AP = sum over tie groups g of (R_g - R_{g-1}) * P_g, i.e. every relevant key contributes the
  precision measured at the end of its own tie group, divided by the number of relevant keys.

A query whose relevant-key count is zero has AP 0 (scikit-learn returns 0 with a warning); the
retrieval protocol never asks for one (it drops such queries or findings first).

Keys that must not take part in one query's ranking (the query itself in a leave-one-out protocol)
are excluded by giving them score ``-inf`` and relevance ``False``: a non-relevant key ranked
strictly last changes no precision value that AP uses.

A leaf module (numpy only) so that the evaluation and anchor curation (``anchors impact``) score
rankings the same way without one package importing the other.
"""

from __future__ import annotations

import numpy as np


def average_precision_rows(scores: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """AP of every row of ``scores`` (n, m) against ``relevance`` (m,) shared or (n, m) per row.

    Returns float64 (n,). Higher score = ranked earlier. NaN scores are rejected.
    """
    scores = np.asarray(scores)
    if scores.ndim == 1:
        scores = scores[None, :]
    if scores.ndim != 2:
        raise ValueError(f"scores must be a (queries, keys) matrix, got shape {scores.shape}")
    n, m = scores.shape
    rel = np.asarray(relevance, dtype=bool)
    if rel.ndim == 1:
        if rel.shape[0] != m:
            raise ValueError(
                f"relevance has {rel.shape[0]} entries but scores have {m} keys; pass one "
                "relevance flag per key"
            )
        rel = np.broadcast_to(rel, (n, m))
    elif rel.shape != (n, m):
        raise ValueError(f"relevance shape {rel.shape} does not match scores shape {(n, m)}")
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    if m == 0:
        raise ValueError("cannot rank an empty key list; the protocol selected no keys")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN; check the embeddings and the geometry's inputs")

    order = np.argsort(-scores, axis=1, kind="stable")
    sorted_scores = np.take_along_axis(scores, order, axis=1)
    sorted_rel = np.take_along_axis(rel, order, axis=1)
    true_positives = np.cumsum(sorted_rel, axis=1, dtype=np.int64)

    # position i ends its tie group when the next score differs (the last position always does)
    group_end = np.ones((n, m), dtype=bool)
    group_end[:, :-1] = sorted_scores[:, :-1] != sorted_scores[:, 1:]
    # index of the end of the tie group holding position i: the first group end at or after i
    positions = np.broadcast_to(np.arange(m), (n, m))
    end_index = np.where(group_end, positions, m)
    end_index = np.minimum.accumulate(end_index[:, ::-1], axis=1)[:, ::-1]

    precision_at_end = np.take_along_axis(true_positives, end_index, axis=1) / (end_index + 1.0)
    n_relevant = true_positives[:, -1]
    total = np.where(sorted_rel, precision_at_end, 0.0).sum(axis=1)
    return np.divide(total, n_relevant, out=np.zeros(n, dtype=np.float64), where=n_relevant > 0)
