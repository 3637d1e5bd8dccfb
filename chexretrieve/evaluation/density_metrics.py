"""Metrics of the density evaluation: AUROC (weighted, for the bootstrap), FPR95, intervals.

* :func:`auroc`: P(score of a positive > score of a negative), ties counted half (Mann–Whitney),
  the same number as ``sklearn.metrics.roc_auc_score``.
* :func:`bootstrap_auroc`: the AUROC under B resamplings at once. Positives are resampled by
  *cluster* (the source picture or phantom an image was made from: the shifts of one phantom, the
  encodings of one file move together), negatives by image; each resampling is a vector of
  multiplicities, and the weighted Mann–Whitney statistic is computed for all B from one sort.
* :func:`percentile_interval`: the 2.5th and 97.5th percentiles of a bootstrap distribution.
"""

from __future__ import annotations

import numpy as np

#: bootstrap resamplings per interval
N_BOOTSTRAP = 500
#: two-sided coverage of the intervals
CONFIDENCE = 0.95


def auroc(positive_scores, negative_scores) -> float:
    """P(score of a positive > score of a negative), ties counted half."""
    pos = np.asarray(positive_scores, dtype=np.float64)
    neg = np.asarray(negative_scores, dtype=np.float64)
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    value = weighted_auroc(pos, neg, np.ones((1, len(pos))), np.ones((1, len(neg))))
    return float(value[0])


def weighted_auroc(pos, neg, pos_weights, neg_weights) -> np.ndarray:
    """AUROC for each row of multiplicities (B, n_pos) and (B, n_neg): Σ w_i v_j ([s_i > t_j]
    + ½ [s_i = t_j]) / (Σ w_i Σ v_j), for all B rows from one sort of the pooled scores."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    pos_weights, neg_weights = np.atleast_2d(pos_weights), np.atleast_2d(neg_weights)
    values = np.concatenate([pos, neg])
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    is_pos = order < len(pos)
    # weights in sorted order: the negatives' (zero at positives) and the positives'
    neg_sorted = np.zeros((neg_weights.shape[0], len(values)))
    neg_sorted[:, ~is_pos] = neg_weights[:, order[~is_pos] - len(pos)]
    pos_sorted = pos_weights[:, order[is_pos]]
    cumulative = np.concatenate([np.zeros((len(neg_sorted), 1)), np.cumsum(neg_sorted, 1)], 1)
    starts = np.searchsorted(ordered, ordered[is_pos], side="left")
    ends = np.searchsorted(ordered, ordered[is_pos], side="right")
    below = cumulative[:, starts]  # negative weight strictly below each positive
    tied = cumulative[:, ends] - below  # negative weight tied with it
    total = (pos_sorted * (below + 0.5 * tied)).sum(axis=1)
    norm = pos_weights.sum(axis=1) * neg_weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, total / norm, np.nan)


def cluster_multiplicities(clusters, n_boot: int, rng) -> np.ndarray:
    """(n_boot, n) multiplicities of items when whole clusters are drawn with replacement."""
    _, index = np.unique(np.asarray(clusters), return_inverse=True)
    n_clusters = int(index.max()) + 1 if len(index) else 0
    if n_clusters == 0:
        return np.zeros((n_boot, 0))
    draws = rng.integers(0, n_clusters, size=(n_boot, n_clusters))
    counts = np.zeros((n_boot, n_clusters))
    np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1.0)
    return counts[:, index]


def _resamplings(n_pos: int, n_neg: int, pos_clusters, n_boot: int, seed: int):
    """(positive, negative) multiplicities of ``n_boot`` resamplings: positives by cluster,
    negatives by image."""
    rng = np.random.default_rng(seed)
    clusters = np.arange(n_pos) if pos_clusters is None else pos_clusters
    return (
        cluster_multiplicities(clusters, n_boot, rng),
        cluster_multiplicities(np.arange(n_neg), n_boot, rng),
    )


def bootstrap_auroc(
    pos, neg, pos_clusters=None, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> tuple[float, float, float]:
    """(AUROC, lower, upper): the point estimate and a percentile interval over resamplings of
    the positives by cluster and of the negatives by image."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    point = auroc(pos, neg)
    if len(pos) < 2 or len(neg) < 2:
        return point, float("nan"), float("nan")
    pos_w, neg_w = _resamplings(len(pos), len(neg), pos_clusters, n_boot, seed)
    lower, upper = percentile_interval(weighted_auroc(pos, neg, pos_w, neg_w))
    return point, lower, upper


def bootstrap_difference(
    pos_a, neg_a, pos_b, neg_b, pos_clusters=None, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> tuple[float, float, float]:
    """AUROC(a) − AUROC(b) of two models scored on the same images, with a paired interval
    (the same resamplings for both)."""
    point = auroc(pos_a, neg_a) - auroc(pos_b, neg_b)
    if len(pos_a) < 2 or len(neg_a) < 2:
        return point, float("nan"), float("nan")
    pos_w, neg_w = _resamplings(len(pos_a), len(neg_a), pos_clusters, n_boot, seed)
    diff = weighted_auroc(pos_a, neg_a, pos_w, neg_w) - weighted_auroc(pos_b, neg_b, pos_w, neg_w)
    lower, upper = percentile_interval(diff)
    return point, lower, upper


def percentile_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return float("nan"), float("nan")
    tail = 100 * (1 - confidence) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def fpr_at_95_tpr(positive_scores, negative_scores) -> float:
    """Share of negatives scoring at or above the threshold that keeps 95 % of the positives."""
    pos = np.sort(np.asarray(positive_scores, dtype=np.float64))
    if len(pos) == 0:
        return float("nan")
    threshold = pos[int(np.floor(0.05 * len(pos)))]  # at least 95 % of positives are >= it
    return float(np.mean(np.asarray(negative_scores) >= threshold))


def entropy_rows(probabilities) -> np.ndarray:
    """Shannon entropy (nats) of each row of a probability matrix (0 log 0 = 0)."""
    p = np.asarray(probabilities, dtype=np.float64)
    logs = np.log(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=1)


def components_for_mass(probabilities, mass: float = 0.9) -> np.ndarray:
    """Per row: the fewest components (largest first) whose probabilities sum to ``mass``."""
    ordered = -np.sort(-np.asarray(probabilities, dtype=np.float64), axis=1)
    return (np.cumsum(ordered, axis=1) < mass - 1e-12).sum(axis=1) + 1
