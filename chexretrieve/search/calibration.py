"""A similarity a radiologist can read (issues 24 and 34): for a result at rank r, how often a
result at that rank has the status that matters, measured on the labelled archive; and whether a
query is unlike every archived image.

A case's *status* for a finding is positive (label 1) or negative (label 0, or not mentioned, as
in the evaluation protocol); uncertain labels (-1) count on neither side. For a geometry, an
anchor set and a finding, archived images with a known status are searched in turn (a seeded
sample, half positive and half negative where the archive allows; their own study excluded, as
always), and three curves over ranks r = 1..K are counted:

* ``positive``: over the positive queries, the share of rank-r results that are positive too;
* ``negative``: over the negative queries, the share of rank-r results that are negative too;
* ``any_query``: the share of rank-r results that are positive, for a query drawn at random from
  the archive's labelled cases (the two conditional shares weighted by the archive's
  prevalence). This is what an upload, whose status nobody knows, is shown: it claims nothing
  about the query.

Each conditional curve is made non-increasing in r by weighted isotonic regression (pool adjacent
violators): a better rank never reads lower. The ``any_query`` mixture is left as counted (a
positive query's curve falls and a negative query's rises with r; their mix need not be
monotone). A result whose status is uncertain counts at its rank on neither side.

The base rate each curve is read against is the archive's: ``prevalence`` (positive, among the
labelled cases) for ``positive`` and ``any_query``, 1 - ``prevalence`` for ``negative``.

"Unlike the archive": the query's highest cosine with any archived image (its own study
excluded) is below the 1st percentile of that value over the sampled archived images.

:func:`status_curves` is the statistic itself, a pure function of arrays (which statuses the
sampled queries had and which their ranked results had), so that an archive index can compute
the curves ahead of time from its own rankings; :func:`calibrate` samples, ranks and calls it.

Kept on disk (the archive index), a calibration is written as plain fields
(``calibration_fields``) or as a sealed record (``calibration_record``), and read back only
through ``calibration_from_fields`` / ``calibration_from_record``: the values are checked
(``check_calibration``: chances in [0, 1], each status's curve non-increasing with the rank), and
a record's seal (the install's key) over its values and the inputs it was measured from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: most (query, gallery row) scores one calibration computes: on large archives fewer queries are
#: sampled (at least ``MIN_QUERIES``), so a first search never scans the gallery 200 times over
ROW_BUDGET = 20_000_000
MIN_QUERIES = 20
#: a status's curve is measured only on at least this many archived queries of that status
MIN_QUERIES_PER_STATUS = 5
#: a calibration needs at least this many archived images with a known status
MIN_LABELLED = 10

POSITIVE, NEGATIVE = 1.0, 0.0


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
    """1.0 positive, 0.0 negative (label 0 or not mentioned), NaN uncertain (-1)."""
    labels = np.asarray(labels, dtype=np.float64)
    out = np.where(labels == 1, POSITIVE, NEGATIVE)
    out[labels == -1] = np.nan
    return out


def prevalence(status: np.ndarray) -> tuple[float, int]:
    """(share positive among the cases with a known status, how many have one)."""
    status = np.asarray(status, dtype=np.float64)
    known = status[~np.isnan(status)]
    return (float(known.mean()) if known.size else float("nan")), int(known.size)


@dataclass(frozen=True)
class StatusCurve:
    """The chance, at ranks 1..K, that a result has ``status``, for queries of one kind."""

    # "positive" or "negative": the status whose chance the curve gives
    status: str
    # chance (0..1) at rank r (index r - 1); NaN where no query had a usable result at r
    probabilities: tuple[float, ...]
    # archived queries it was measured on
    n_queries: int
    # the chance that a random labelled archived case has ``status`` (what to read it against)
    base_rate: float

    def at(self, rank: int) -> float | None:
        if not 1 <= rank <= len(self.probabilities):
            return None
        value = self.probabilities[rank - 1]
        return None if np.isnan(value) else value


@dataclass(frozen=True)
class RankCalibration:
    # positive queries: the chance a result at each rank is positive (None: too few measured)
    positive: StatusCurve | None
    # negative queries: the chance a result at each rank is negative (None: too few measured)
    negative: StatusCurve | None
    # a query of unknown status (an upload): the chance a result at each rank is positive
    any_query: StatusCurve | None
    # share of the labelled archived cases that are positive
    prevalence: float
    # archived cases with a known status (the denominator of ``prevalence``)
    n_labelled: int
    # 1st percentile of the sampled archived images' highest cosine with another archived image
    nearest_low: float = float("nan")

    @property
    def n_queries(self) -> int:
        return sum(c.n_queries for c in (self.positive, self.negative) if c is not None)

    def curve_for(self, query_status: float | None) -> StatusCurve | None:
        """The curve a query of ``query_status`` (1.0, 0.0, or None / NaN: unknown) is shown."""
        if query_status is None or np.isnan(query_status):
            return self.any_query
        return self.positive if query_status == POSITIVE else self.negative


def _shares(query_status, result_status, wanted: float, of_queries: float):
    """(share of usable rank-r results whose status is ``wanted`` over the queries whose status
    is ``of_queries``, usable results per rank, queries counted)."""
    rows = result_status[query_status == of_queries]
    usable = ~np.isnan(rows)
    counted = usable.sum(axis=0).astype(np.float64)
    hits = ((rows == wanted) & usable).sum(axis=0).astype(np.float64)
    share = np.divide(hits, counted, out=np.full_like(hits, np.nan), where=counted > 0)
    return share, counted, int(rows.shape[0])


def _fitted(share: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """``share`` made non-increasing where measured (ranks no query reached stay NaN)."""
    out = np.full_like(share, np.nan)
    measured = counted > 0
    if measured.any():
        out[measured] = isotonic_decreasing(share[measured], counted[measured])
    return out


def status_curves(
    query_status: np.ndarray,
    result_status: np.ndarray,
    archive_prevalence: float,
    n_labelled: int,
    nearest_low: float = float("nan"),
) -> RankCalibration:
    """The three curves from measured rankings: ``query_status`` (Q,) the sampled queries'
    statuses (1 / 0), ``result_status`` (Q, K) their rank-1..K results' statuses (1 / 0; NaN:
    uncertain, or no result at that rank)."""
    query_status = np.asarray(query_status, dtype=np.float64).reshape(-1)
    result_status = np.asarray(result_status, dtype=np.float64)
    if result_status.ndim != 2 or result_status.shape[0] != query_status.shape[0]:
        raise ValueError(
            f"result statuses must be (queries, ranks) = ({query_status.shape[0]}, K), "
            f"not {result_status.shape}"
        )
    p = float(archive_prevalence)
    pos_share, pos_counted, n_pos = _shares(query_status, result_status, POSITIVE, POSITIVE)
    neg_share, neg_counted, n_neg = _shares(query_status, result_status, NEGATIVE, NEGATIVE)
    positive = negative = any_query = None
    if n_pos >= MIN_QUERIES_PER_STATUS and pos_counted.any():
        positive = StatusCurve("positive", _tuple(_fitted(pos_share, pos_counted)), n_pos, p)
    if n_neg >= MIN_QUERIES_PER_STATUS and neg_counted.any():
        negative = StatusCurve("negative", _tuple(_fitted(neg_share, neg_counted)), n_neg, 1 - p)
    if positive is not None and negative is not None:
        # P(result positive) = p·P(pos | positive query) + (1 - p)·(1 - P(neg | negative query))
        mixed = p * pos_share + (1.0 - p) * (1.0 - neg_share)
        any_query = StatusCurve("positive", _tuple(mixed), n_pos + n_neg, p)
    return RankCalibration(positive, negative, any_query, p, int(n_labelled), float(nearest_low))


def _tuple(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def sample_queries(status: np.ndarray, n_queries: int, seed: int = 0) -> np.ndarray:
    """Rows of up to ``n_queries`` archived queries with a known status, half positive and half
    negative where the archive has enough of each (the rest from the other status), sorted."""
    status = np.asarray(status, dtype=np.float64)
    rng = np.random.default_rng(seed)
    pos = np.flatnonzero(status == POSITIVE)
    neg = np.flatnonzero(status == NEGATIVE)
    n_queries = min(int(n_queries), len(pos) + len(neg))
    take_pos = min(len(pos), max(n_queries // 2, n_queries - len(neg)))
    take_neg = n_queries - take_pos
    picked = np.concatenate(
        [
            rng.choice(pos, size=take_pos, replace=False),
            rng.choice(neg, size=take_neg, replace=False),
        ]
    )
    return np.sort(picked)


def calibrate(
    scores_of: Callable[[int], tuple[np.ndarray, np.ndarray]] | None,
    image_ids: np.ndarray,
    labels: np.ndarray,
    embeddings: np.ndarray,
    top_k: int,
    n_queries: int,
    seed: int = 0,
    nearest_of: Callable[[int, np.ndarray], float] | None = None,
    ranked_of: Callable[[int, int], tuple[np.ndarray, np.ndarray]] | None = None,
) -> RankCalibration | None:
    """``scores_of(image id)`` -> (scores, eligible) over the gallery rows for that archived
    query (ranked here, ties in row order). None when fewer than ``MIN_LABELLED`` images have a
    known status.
    ``ranked_of(image id, k)`` -> (its top k eligible rows best first, eligible), instead of
    ``scores_of``, when the caller ranks by a top-k scan without every row's score (the search
    service: its own ranking, ties by image id).
    ``nearest_of(row, eligible)``: the row's highest cosine with an eligible row, when the caller
    scans it without copying the gallery (then ``embeddings`` is not read; by default
    ``embeddings[eligible] @ row``)."""
    status = statuses(labels)
    share, n_labelled = prevalence(status)
    if n_labelled < MIN_LABELLED:
        return None
    picked = sample_queries(status, queries_for(len(image_ids), n_queries), seed)
    found = np.full((len(picked), int(top_k)), np.nan)
    searched = np.zeros(len(picked), dtype=bool)
    nearest = []
    if (scores_of is None) == (ranked_of is None):
        raise ValueError("calibrate needs exactly one of scores_of and ranked_of")
    rows = np.asarray(embeddings, dtype=np.float32) if nearest_of is None else None
    for i, row in enumerate(picked):
        if ranked_of is not None:
            order, eligible = ranked_of(int(image_ids[row]), int(top_k))
            if len(order) == 0:
                continue
        else:
            scores, eligible = scores_of(int(image_ids[row]))  # type: ignore[misc]
            allowed = np.flatnonzero(eligible)
            if len(allowed) == 0:
                continue
            order = allowed[best_first(np.asarray(scores)[allowed], top_k)]
        found[i, : len(order)] = status[order]
        searched[i] = True
        if nearest_of is not None:
            nearest.append(float(nearest_of(int(row), np.asarray(eligible, dtype=bool))))
        else:
            nearest.append(float((rows[np.asarray(eligible, dtype=bool)] @ rows[row]).max()))
    if not searched.any():
        return None
    low = float(np.percentile(nearest, 1))
    return status_curves(status[picked][searched], found[searched], share, n_labelled, low)


# ------------------------------------------------------------------- kept on disk (issue 36)
#: the seal's kind of a stored calibration
SEAL_KIND = "rank-calibration"
_CURVES = ("positive", "negative", "any_query")


def check_calibration(calibration: RankCalibration) -> None:
    """ValueError naming the first value no calibration holds: a chance outside [0, 1] or
    infinite, a status's curve rising with the rank, a curve of no queries, a base rate or
    prevalence outside [0, 1], a cosine outside [-1, 1]. NaN marks a rank no query reached."""
    for name in _CURVES:
        curve = getattr(calibration, name)
        if curve is None:
            continue
        chances = np.asarray(curve.probabilities, dtype=np.float64)
        if chances.ndim != 1 or chances.size == 0:
            raise ValueError(f"its {name} curve holds {chances.size} chances per rank")
        measured = chances[~np.isnan(chances)]
        if np.isinf(measured).any():
            raise ValueError(f"its {name} curve holds chances that are not finite")
        if (measured < 0).any() or (measured > 1).any():
            raise ValueError(f"its {name} curve holds chances outside [0, 1]")
        if name != "any_query" and (np.diff(measured) > 1e-12).any():
            raise ValueError(f"its {name} curve's chances rise with the rank")
        if int(curve.n_queries) < 1:
            raise ValueError(f"its {name} curve was measured on {curve.n_queries} queries")
        if not 0 <= curve.base_rate <= 1:
            raise ValueError(f"its {name} curve's base rate is {curve.base_rate}")
    share = calibration.prevalence
    if share == share and not 0 <= share <= 1:
        raise ValueError(f"its prevalence is {share}")
    if int(calibration.n_labelled) < 0:
        raise ValueError(f"it counts {calibration.n_labelled} labelled cases")
    low = calibration.nearest_low
    if low == low and not -1 - 1e-6 <= low <= 1 + 1e-6:  # NaN: no archived query had a neighbour
        raise ValueError(f"its nearest-cosine percentile is {low}")


def calibration_fields(calibration: RankCalibration) -> dict:
    """The calibration as strict-JSON-ready fields (NaN written as null)."""

    def number(value: float) -> float | None:
        return None if value != value else float(value)

    def curve(c: StatusCurve | None) -> dict | None:
        if c is None:
            return None
        return {
            "status": c.status,
            "probabilities": [number(v) for v in c.probabilities],
            "n_queries": int(c.n_queries),
            "base_rate": number(c.base_rate),
        }

    return {
        **{name: curve(getattr(calibration, name)) for name in _CURVES},
        "prevalence": number(calibration.prevalence),
        "n_labelled": int(calibration.n_labelled),
        "nearest_low": number(calibration.nearest_low),
    }


def calibration_from_fields(fields: object) -> RankCalibration:
    """The calibration of stored fields, checked (ValueError naming what is wrong)."""

    def number(value: object) -> float:
        return float("nan") if value is None else float(value)

    def curve(value: object) -> StatusCurve | None:
        if value is None:
            return None
        return StatusCurve(
            status=str(value["status"]),
            probabilities=tuple(number(v) for v in value["probabilities"]),
            n_queries=int(value["n_queries"]),
            base_rate=number(value["base_rate"]),
        )

    if not isinstance(fields, dict):
        raise ValueError("the stored calibration is not a JSON object")
    try:
        calibration = RankCalibration(
            *(curve(fields[name]) for name in _CURVES),
            prevalence=number(fields["prevalence"]),
            n_labelled=int(fields["n_labelled"]),
            nearest_low=number(fields["nearest_low"]),
        )
    except (KeyError, TypeError, ValueError):
        raise ValueError("the stored calibration lacks or mistypes a value") from None
    check_calibration(calibration)
    return calibration


def calibration_record(calibration: RankCalibration, inputs: dict) -> dict:
    """The calibration as a JSON-ready record, sealed (chexretrieve.seal, the install's key) with
    the ``inputs`` it was measured from (archive, geometry, anchor set, finding, top k, ...)."""
    from chexretrieve.seal import canonical_json, seal

    check_calibration(calibration)
    values = calibration_fields(calibration)
    digest = hashlib.sha256(canonical_json(values)).hexdigest()
    return {**values, "seal": seal(SEAL_KIND, {"values": digest}, inputs)}


def calibration_from_record(record: object, inputs: dict) -> RankCalibration:
    """The calibration of a stored record, verified before use: ValueError (SealError for a
    forged, edited or foreign record, or one made from other ``inputs``) naming the problem."""
    from chexretrieve.seal import canonical_json, check_seal

    if not isinstance(record, dict):
        raise ValueError("the stored calibration is not a JSON object")
    values = {k: v for k, v in record.items() if k != "seal"}
    digest = hashlib.sha256(canonical_json(values)).hexdigest()
    check_seal(record.get("seal"), SEAL_KIND, {"values": digest}, inputs)
    return calibration_from_fields(values)
