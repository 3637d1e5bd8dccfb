"""A similarity that means something across queries and geometries (issue 24, defect 5): the
chance that a result at a given rank shares the query's finding status, measured on the labelled
archive, and whether a query is unlike every archived image.

For a geometry, an anchor set and a finding, up to ``SearchConfig.calibration_queries`` archived
images whose label of the finding is known are searched in turn (seeded sample; their own study
excluded, as always). A case's *status* is present (label 1) or absent (0, or not mentioned, as in
the evaluation protocol); uncertain labels (-1) are left out on both sides. At each rank r = 1..K
the share of results whose status equals the query's is counted over the sampled queries, and
made non-increasing in r by weighted isotonic regression (pool-adjacent-violators): a better rank
never gets a lower chance. ``chance`` is the same share for a random pair of archived cases.

"Unlike the archive": the query's highest cosine with any archived image (its own study
excluded) is below the 1st percentile of that value over the sampled archived images.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: most (query, gallery row) scores one calibration computes: on large archives fewer queries are
#: sampled (at least ``MIN_QUERIES``), so a first search never scans the gallery 200 times over
ROW_BUDGET = 20_000_000
MIN_QUERIES = 20


def queries_for(gallery_rows: int, wanted: int) -> int:
    """How many archived queries a calibration samples on a gallery of ``gallery_rows``."""
    affordable = ROW_BUDGET // max(1, gallery_rows)
    return max(min(wanted, MIN_QUERIES), min(wanted, affordable))


def isotonic_decreasing(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares non-increasing fit of ``values`` (pool adjacent violators)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    blocks: list[list[float]] = []  # [mean, weight, length]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            mean2, weight2, length2 = blocks.pop()
            mean1, weight1, length1 = blocks.pop()
            total = weight1 + weight2
            mean = (mean1 * weight1 + mean2 * weight2) / total if total > 0 else (mean1 + mean2) / 2
            blocks.append([mean, total, length1 + length2])
    return np.concatenate([np.full(int(length), mean) for mean, _, length in blocks])


def best_first(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``values``, best first, ties in position order: exactly
    ``np.argsort(-values, kind="stable")[:k]``, without sorting all of them (a calibration
    ranks a million scores per sampled query)."""
    negated = -np.asarray(values)  # ascending order of negated values; NaN last, as argsort
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    if k >= len(negated):
        return np.argsort(negated, kind="stable")[:k]
    kth = np.partition(negated, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: the NaN tail is ordered by position as well
        return np.argsort(negated, kind="stable")[:k]
    near = np.flatnonzero(negated <= kth)  # the k best and every row tied with the k-th
    return near[np.argsort(negated[near], kind="stable")[:k]]


def statuses(labels: np.ndarray) -> np.ndarray:
    """1.0 present, 0.0 absent (label 0 or not mentioned), NaN uncertain (-1)."""
    labels = np.asarray(labels, dtype=np.float64)
    out = np.where(labels == 1, 1.0, 0.0)
    out[labels == -1] = np.nan
    return out


@dataclass(frozen=True)
class RankCalibration:
    # chance that the result at rank r (index r - 1) shares the query's status
    probabilities: tuple[float, ...]
    # archived queries it was measured on
    n_queries: int
    # the same chance for a random pair of archived cases
    chance: float
    # 1st percentile of the archived images' highest cosine with another archived image
    nearest_low: float

    def at(self, rank: int) -> float | None:
        return self.probabilities[rank - 1] if 1 <= rank <= len(self.probabilities) else None


def calibrate(
    scores_of: Callable[[int], tuple[np.ndarray, np.ndarray]],
    image_ids: np.ndarray,
    labels: np.ndarray,
    embeddings: np.ndarray,
    top_k: int,
    n_queries: int,
    seed: int = 0,
    nearest_of: Callable[[int, np.ndarray], float] | None = None,
) -> RankCalibration | None:
    """``scores_of(image id)`` -> (scores, eligible) over the gallery rows for that archived
    query. None when fewer than 10 images have a known status. ``nearest_of(row, eligible)``:
    the row's highest cosine with an eligible row, when the caller scans it without copying the
    gallery (then ``embeddings`` is not read; by default ``embeddings[eligible] @ row``)."""
    status = statuses(labels)
    known = np.flatnonzero(~np.isnan(status))
    if len(known) < 10:
        return None
    rng = np.random.default_rng(seed)
    n_queries = queries_for(len(image_ids), n_queries)
    picked = rng.choice(known, size=min(n_queries, len(known)), replace=False)
    same = np.zeros(top_k)
    counted = np.zeros(top_k)
    nearest = []
    rows = np.asarray(embeddings, dtype=np.float32) if nearest_of is None else None
    for row in picked:
        scores, eligible = scores_of(int(image_ids[row]))
        allowed = np.flatnonzero(eligible)
        if len(allowed) == 0:
            continue
        order = allowed[best_first(np.asarray(scores)[allowed], top_k)]
        found = status[order]
        usable = ~np.isnan(found)
        same[: len(order)] += (found == status[row]) & usable
        counted[: len(order)] += usable
        if nearest_of is not None:
            nearest.append(float(nearest_of(int(row), np.asarray(eligible, dtype=bool))))
            continue
        cosines = rows[allowed] @ rows[row]
        nearest.append(float(cosines.max()))
    if counted.sum() == 0:
        return None
    share = np.divide(same, counted, out=np.zeros_like(same), where=counted > 0)
    fitted = isotonic_decreasing(share, counted)
    present = float(np.nanmean(status))
    return RankCalibration(
        probabilities=tuple(float(v) for v in fitted),
        n_queries=len(picked),
        chance=present**2 + (1.0 - present) ** 2,
        nearest_low=float(np.percentile(nearest, 1)) if nearest else float("nan"),
    )
