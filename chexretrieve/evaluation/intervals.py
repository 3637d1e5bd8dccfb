"""Bootstrap intervals over anchor-set variants x encoder checkpoints x patients.

The data of one finding is a matrix ``D`` (cells x queries): one row per (anchor variant,
checkpoint) cell, one column per query image, each entry a per-query AP (or an AP difference between
two geometries computed on the same cell and query, so the comparison is paired). The point estimate
is the mean of ``D`` (every query image weighs the same). One bootstrap replicate:

1. draws the cells with replacement (``n_cells`` draws): the variability of anchor generation and of
   model training;
2. draws the *patients* with replacement (``n_patients`` draws; a cluster bootstrap): every drawn
   patient brings all of its query images, so a frontal and its lateral, or two studies of one
   patient, move together instead of counting as independent evidence. Without patient ids (or with
   ``IntervalConfig.unit = "image"``) each image is its own cluster: the ordinary bootstrap of the
   queries, draw for draw. With ``query_resampling="shared"`` (default) one patient draw serves
   every cell, because the same validation images are the queries of every cell (a crossed design;
   independent draws per cell would average the query effect away and make the interval too
   narrow). With ``"per_cell"`` each drawn cell gets its own patient draw (the nested two-level
   bootstrap);
3. takes the mean of the resampled entries (sum over drawn cells and images / their number).

The interval is the percentile interval of ``B`` replicates. With shared draws a replicate's mean is
``w_c^T D w_q / (n_cells * sum(w_q))`` (w_c = cell draw counts; w_q = each query's patient's draw
count), so all replicates cost a few matrix products. A finding whose queries come from fewer than 2
patients has no interval (resampling one patient only reproduces it): ``Interval.low``/``high`` are
NaN and ``Interval.note`` says why.

For an average over findings, every replicate uses the same cell draw for all findings (the
cells are shared) and an independent patient draw per finding, and averages the findings' replicate
means with equal weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chexretrieve.evaluation.config import IntervalConfig


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float  # NaN when there is no interval (see note)
    high: float
    n_cells: int
    n_queries: int
    n_patients: int = 0  # resampled clusters (patients; images when there are no patient ids)
    note: str = ""  # why there is no interval, e.g. "1 patient among the queries"
    p_value: float = float("nan")  # two-sided bootstrap p-value of "the mean is 0" (bootstrap_p)

    @property
    def has_interval(self) -> bool:
        return not (np.isnan(self.low) or np.isnan(self.high))

    def format(self, digits: int = 3, signed: bool = True) -> str:
        sign = "+" if signed else ""
        fmt = f"{sign}.{digits}f"
        if not self.has_interval:
            return f"{self.mean:{fmt}} [n/a: {self.note}]"
        return f"{self.mean:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def _check_matrix(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] == 0:
        raise ValueError(
            f"bootstrap needs a non-empty (cells, queries) matrix, got shape {values.shape}"
        )
    if np.isnan(values).any():
        raise ValueError("bootstrap matrix has missing entries; every cell must score every query")
    return values


def cluster_codes(clusters, n_queries: int) -> np.ndarray:
    """Code 0..P-1 of each query's cluster (patient), numbered in order of first appearance, so
    that one image per patient gives codes 0..n-1 in query order; None: each query its own."""
    if clusters is None:
        return np.arange(n_queries)
    labels = np.asarray(clusters).astype(str)
    if labels.shape != (n_queries,):
        raise ValueError(
            f"bootstrap clusters give {labels.shape} patient ids for {n_queries} queries; pass "
            "one patient id per query column"
        )
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse]


def _cell_draws(rng: np.random.Generator, n_cells: int, n_boot: int) -> np.ndarray:
    """(B, n_cells) indices of the cells drawn with replacement in each replicate."""
    return rng.integers(0, n_cells, size=(n_boot, n_cells))


def _replicate_means(
    values: np.ndarray,
    cell_draws: np.ndarray,
    rng: np.random.Generator,
    mode: str,
    codes: np.ndarray,
) -> np.ndarray:
    n_cells, _ = values.shape
    n_boot = cell_draws.shape[0]
    n_patients = int(codes.max()) + 1
    uniform = np.full(n_patients, 1.0 / n_patients)
    if mode == "shared":
        # multinomial patient counts; each query weighs its patient's count
        cell_w = np.stack([np.bincount(d, minlength=n_cells) for d in cell_draws]).astype(float)
        patient_w = rng.multinomial(n_patients, uniform, size=n_boot).astype(np.float64)
        query_w = patient_w[:, codes]
        totals = np.einsum("bc,cq,bq->b", cell_w, values, query_w)
        return totals / (n_cells * query_w.sum(axis=1))
    # every drawn cell (duplicates included) gets its own patient draw
    means = np.zeros(n_boot)
    for b in range(n_boot):
        patient_w = rng.multinomial(n_patients, uniform, size=n_cells).astype(np.float64)
        query_w = patient_w[:, codes]
        means[b] = np.sum(values[cell_draws[b]] * query_w) / query_w.sum()
    return means


def bootstrap_p(replicates: np.ndarray) -> float:
    """Two-sided bootstrap p-value of "the mean is 0" from the replicate means: twice the smaller
    tail share of replicates on either side of 0, each count plus one (the observed sample),
    ``min(1, 2 min(#{r <= 0} + 1, #{r >= 0} + 1) / (B + 1))``. It inverts the percentile interval:
    the 95% interval excludes 0 exactly when fewer than 2.5% of the replicates lie beyond it, i.e.
    about when p < 0.05; with B replicates p is never below 2 / (B + 1)."""
    reps = np.asarray(replicates, dtype=np.float64)
    below, above = int((reps <= 0).sum()), int((reps >= 0).sum())
    return float(min(1.0, 2.0 * (min(below, above) + 1) / (len(reps) + 1)))


def _interval(point: float, replicates: np.ndarray, config: IntervalConfig, shape, n_patients):
    tail = (1.0 - config.confidence) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return Interval(
        float(point),
        float(low),
        float(high),
        int(shape[0]),
        int(shape[1]),
        int(n_patients),
        p_value=bootstrap_p(replicates),
    )


def _too_few(point: float, shape, n_patients: int, what: str = "") -> Interval:
    unit = "patient" if n_patients == 1 else "patients"
    note = f"{n_patients} {unit} among the queries{what}; an interval needs at least 2"
    return Interval(float(point), np.nan, np.nan, int(shape[0]), int(shape[1]), n_patients, note)


def bootstrap_mean(
    values: np.ndarray, config: IntervalConfig, *, seed_offset: int = 0, clusters=None
) -> Interval:
    """Mean of a (cells, queries) matrix with its two-level (cells x patients) percentile interval.

    ``clusters``: the patient id of each query column (None: each query is its own patient)."""
    values = _check_matrix(values)
    codes = cluster_codes(clusters, values.shape[1])
    n_patients = int(codes.max()) + 1
    if n_patients < 2:
        return _too_few(values.mean(), values.shape, n_patients)
    rng = np.random.default_rng([config.seed, seed_offset])
    cell_draws = _cell_draws(rng, values.shape[0], config.n_bootstrap)
    reps = _replicate_means(values, cell_draws, rng, config.query_resampling, codes)
    return _interval(values.mean(), reps, config, values.shape, n_patients)


def bootstrap_mean_of_findings(
    matrices: Sequence[np.ndarray],
    config: IntervalConfig,
    *,
    seed_offset: int = 0,
    clusters: Sequence | None = None,
) -> Interval:
    """Equal-weight average over findings of each finding's mean; cells must align across them.

    ``clusters``: per finding, the patient id of each query column (None: images)."""
    if not matrices:
        raise ValueError("no findings to average; every finding was skipped")
    mats = [_check_matrix(m) for m in matrices]
    n_cells = mats[0].shape[0]
    if any(m.shape[0] != n_cells for m in mats):
        raise ValueError(
            "findings have different numbers of variant x checkpoint cells; the average over "
            "findings needs the same cells for every finding (use the same number of variants)"
        )
    per_finding = clusters if clusters is not None else [None] * len(mats)
    if len(per_finding) != len(mats):
        raise ValueError(f"{len(per_finding)} cluster lists for {len(mats)} findings")
    codes = [cluster_codes(c, m.shape[1]) for c, m in zip(per_finding, mats, strict=True)]
    point = float(np.mean([m.mean() for m in mats]))
    total_q = sum(m.shape[1] for m in mats)
    fewest = min(int(c.max()) + 1 for c in codes)
    if fewest < 2:
        return _too_few(point, (n_cells, total_q), fewest, " of a finding")
    rng = np.random.default_rng([config.seed, seed_offset, len(mats)])
    cell_draws = _cell_draws(rng, n_cells, config.n_bootstrap)
    reps = np.mean(
        [
            _replicate_means(m, cell_draws, rng, config.query_resampling, c)
            for m, c in zip(mats, codes, strict=True)
        ],
        axis=0,
    )
    return _interval(point, reps, config, (n_cells, total_q), sum(int(c.max()) + 1 for c in codes))
