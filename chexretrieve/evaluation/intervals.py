"""Bootstrap intervals over anchor-set variants x encoder checkpoints x queries.

The data of one finding is a matrix ``D`` (cells x queries): one row per (anchor variant,
checkpoint) cell, one column per query, each entry a per-query AP (or an AP difference between two
geometries computed on the same cell and query, so the comparison is paired). The point estimate is
the mean of ``D``. One bootstrap replicate:

1. draws the cells with replacement (``n_cells`` draws): the variability of anchor generation and of
   model training;
2. draws the queries with replacement (``n_queries`` draws): the sampling variability of the
   validation images. With ``query_resampling="shared"`` (default) one query draw serves every cell,
   because the same validation images are the queries of every cell (a crossed design; independent
   draws per cell would average the query effect away and make the interval too narrow). With
   ``"per_cell"`` each drawn cell gets its own query draw (the nested two-level bootstrap);
3. takes the mean of the resampled entries.

The interval is the percentile interval of ``B`` replicates. With shared query draws a replicate's
mean is ``w_c^T D w_q / (n_cells n_queries)`` (w = draw counts), so all replicates cost a few matrix
products.

For an average over findings, every replicate uses the same cell draw for all findings (the
cells are shared) and an independent query draw per finding (the queries differ), and averages the
findings' replicate means with equal weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chexretrieve.evaluation.config import IntervalConfig


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n_cells: int
    n_queries: int

    def format(self, digits: int = 3, signed: bool = True) -> str:
        sign = "+" if signed else ""
        fmt = f"{sign}.{digits}f"
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


def _cell_draws(rng: np.random.Generator, n_cells: int, n_boot: int) -> np.ndarray:
    """(B, n_cells) indices of the cells drawn with replacement in each replicate."""
    return rng.integers(0, n_cells, size=(n_boot, n_cells))


def _replicate_means(
    values: np.ndarray, cell_draws: np.ndarray, rng: np.random.Generator, mode: str
) -> np.ndarray:
    n_cells, n_queries = values.shape
    n_boot = cell_draws.shape[0]
    uniform = np.full(n_queries, 1.0 / n_queries)
    if mode == "shared":
        # multinomial counts: the mean over drawn cells x drawn queries is w_c^T D w_q / (C Q)
        cell_w = np.stack([np.bincount(d, minlength=n_cells) for d in cell_draws]).astype(float)
        query_w = rng.multinomial(n_queries, uniform, size=n_boot).astype(np.float64)
        totals = np.einsum("bc,cq,bq->b", cell_w, values, query_w)
    else:
        # every drawn cell (duplicates included) gets its own query draw
        totals = np.zeros(n_boot)
        for b in range(n_boot):
            query_w = rng.multinomial(n_queries, uniform, size=n_cells).astype(np.float64)
            totals[b] = np.sum(values[cell_draws[b]] * query_w)
    return totals / (n_cells * n_queries)


def _interval(point: float, replicates: np.ndarray, config: IntervalConfig, shape) -> Interval:
    tail = (1.0 - config.confidence) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return Interval(float(point), float(low), float(high), int(shape[0]), int(shape[1]))


def bootstrap_mean(values: np.ndarray, config: IntervalConfig, *, seed_offset: int = 0) -> Interval:
    """Mean of a (cells, queries) matrix with its two-level bootstrap percentile interval."""
    values = _check_matrix(values)
    rng = np.random.default_rng([config.seed, seed_offset])
    cell_draws = _cell_draws(rng, values.shape[0], config.n_bootstrap)
    reps = _replicate_means(values, cell_draws, rng, config.query_resampling)
    return _interval(values.mean(), reps, config, values.shape)


def bootstrap_mean_of_findings(
    matrices: Sequence[np.ndarray], config: IntervalConfig, *, seed_offset: int = 0
) -> Interval:
    """Equal-weight average over findings of each finding's mean; cells must align across them."""
    if not matrices:
        raise ValueError("no findings to average; every finding was skipped")
    mats = [_check_matrix(m) for m in matrices]
    n_cells = mats[0].shape[0]
    if any(m.shape[0] != n_cells for m in mats):
        raise ValueError(
            "findings have different numbers of variant x checkpoint cells; the average over "
            "findings needs the same cells for every finding (use the same number of variants)"
        )
    rng = np.random.default_rng([config.seed, seed_offset, len(mats)])
    cell_draws = _cell_draws(rng, n_cells, config.n_bootstrap)
    reps = np.mean(
        [_replicate_means(m, cell_draws, rng, config.query_resampling) for m in mats], axis=0
    )
    point = float(np.mean([m.mean() for m in mats]))
    total_q = sum(m.shape[1] for m in mats)
    return _interval(point, reps, config, (n_cells, total_q))
