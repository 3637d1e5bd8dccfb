"""The calibrated similarity (issues 24 and 34): at each rank, the chance that a result is
positive / negative, conditioned on the query's status, and for an upload the chance that it is
positive; checked against a naive count written independently here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression

from chexretrieve.search.calibration import (
    best_first,
    calibrate,
    isotonic_decreasing,
    sample_queries,
    status_curves,
    statuses,
)

FINDING = "Pleural Effusion"


def test_isotonic_fit_matches_a_reference_implementation() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        values = rng.random(15)
        weights = rng.integers(1, 9, size=15).astype(float)
        reference = IsotonicRegression(increasing=False).fit_transform(
            np.arange(15), values, sample_weight=weights
        )
        np.testing.assert_allclose(isotonic_decreasing(values, weights), reference, atol=1e-12)


# ----------------------------------------------------------------------- a labelled archive
def _labelled_archive(n=160, seed=1, uncertain=0.05):
    """Embeddings that cluster by the finding (so rankings are informative but imperfect), a rare
    finding (~15 % positive), some labels uncertain, some not mentioned, two images per study."""
    rng = np.random.default_rng(seed)
    p_uncertain = uncertain
    labels = rng.choice(
        [1.0, 0.0, np.nan, -1.0], size=n, p=[0.15, 0.5, 0.35 - p_uncertain, p_uncertain]
    )
    centre = rng.standard_normal(16)
    embeddings = rng.standard_normal((n, 16)) + 1.2 * np.outer(labels == 1, centre)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return np.arange(1, n + 1), labels, embeddings.astype(np.float32)


def _service(tmp_path, ids, labels, embeddings):
    from chexretrieve.findings import FINDINGS
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.gallery import Gallery
    from chexretrieve.search.service import SearchService

    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.{(i - 1) // 2}" for i in ids],
            "view_position": "PA",
            "patient_sex": "F",
            "patient_age_years": 50.0,
            "study_date": None,
            "split": "train",
        },
        index=ids,
    )
    table = pd.DataFrame(np.nan, index=ids, columns=list(FINDINGS))
    table[FINDING] = labels
    gallery = Gallery("fake:calibration", ids, embeddings, meta, table)
    config = SearchConfig(feature_cache_dir=tmp_path / "features", calibration_queries=10_000)
    return SearchService(lambda: gallery, _NoAnchors(), config=config)


class _NoAnchors:
    """Cosine needs no anchors; the calibration only asks for the set's key."""

    def anchor_set(self, finding, key):
        from chexretrieve.search.service import AnchorSetRef

        return AnchorSetRef("none@1", "none", (), np.zeros((0, 16)))


def _naive_rankings(ids, embeddings, top_k):
    """For every archived image: the ids of its top-k results by cosine, its own study left out,
    ties broken by the lower id (plain Python loops)."""
    out = {}
    for q in range(len(ids)):
        study = q // 2
        others = []
        for r in range(len(ids)):
            if r // 2 == study:
                continue
            cosine = float(
                sum(float(a) * float(b) for a, b in zip(embeddings[q], embeddings[r], strict=True))
            )
            others.append((-cosine, int(ids[r]), r))
        others.sort()
        out[q] = [r for _, _, r in others[:top_k]]
    return out


def _word(label) -> str:
    if label == 1:
        return "positive"
    if label == -1:
        return "uncertain"
    return "negative"  # 0 or not mentioned


def _naive_curves(labels, rankings, top_k):
    """Share of rank-r results positive (positive queries) / negative (negative queries), and the
    archive's prevalence, by counting."""
    words = [_word(v) for v in labels]
    known = [w for w in words if w != "uncertain"]
    p = known.count("positive") / len(known)
    curves = {}
    for status in ("positive", "negative"):
        queries = [q for q, w in enumerate(words) if w == status]
        share, weight = [], []
        for rank in range(top_k):
            same = usable = 0
            for q in queries:
                w = words[rankings[q][rank]]
                if w != "uncertain":
                    usable += 1
                    same += w == status
            share.append(same / usable)
            weight.append(usable)
        curves[status] = (np.array(share), np.array(weight, float), len(queries))
    return curves, p


def test_the_curves_equal_a_naive_count_on_a_labelled_archive(tmp_path) -> None:
    top_k = 8
    ids, labels, embeddings = _labelled_archive()
    service = _service(tmp_path, ids, labels, embeddings)
    from chexretrieve.search.service import SearchRequest

    found = service.rank_calibration(SearchRequest(finding=FINDING, geometry="cosine"), top_k)
    curves, p = _naive_curves(labels, _naive_rankings(ids, embeddings, top_k), top_k)
    assert found.prevalence == pytest.approx(p)
    assert found.n_labelled == int(np.sum(labels != -1))
    for status, curve in (("positive", found.positive), ("negative", found.negative)):
        share, weight, n = curves[status]
        assert curve.status == status and curve.n_queries == n
        reference = IsotonicRegression(increasing=False).fit_transform(
            np.arange(top_k), share, sample_weight=weight
        )
        np.testing.assert_allclose(curve.probabilities, reference, atol=1e-12)
    assert found.positive.base_rate == pytest.approx(p)
    assert found.negative.base_rate == pytest.approx(1 - p)
    # an upload: the chance that the rank-r result is positive, for a random labelled query
    pos_share, _, _ = curves["positive"]
    neg_share, _, _ = curves["negative"]
    np.testing.assert_allclose(
        found.any_query.probabilities, p * pos_share + (1 - p) * (1 - neg_share), atol=1e-12
    )
    assert found.any_query.status == "positive" and found.any_query.base_rate == pytest.approx(p)
    # informative rankings: a positive query's first result is positive far above the base rate
    assert found.positive.probabilities[0] > 2 * p
    assert found.negative.probabilities[0] > 1 - p - 0.05


def test_an_upload_curve_is_the_plain_share_of_positive_results_without_uncertain_labels(
    tmp_path,
) -> None:
    """Without uncertain labels and with every labelled case searched, the upload curve is simply
    the share of rank-r results that are positive over every archived query."""
    top_k = 6
    ids, labels, embeddings = _labelled_archive(n=120, seed=5, uncertain=0.0)
    service = _service(tmp_path, ids, labels, embeddings)
    from chexretrieve.search.service import SearchRequest

    found = service.rank_calibration(SearchRequest(finding=FINDING, geometry="cosine"), top_k)
    rankings = _naive_rankings(ids, embeddings, top_k)
    plain = [
        np.mean([labels[rankings[q][rank]] == 1 for q in range(len(ids))]) for rank in range(top_k)
    ]
    np.testing.assert_allclose(found.any_query.probabilities, plain, atol=1e-12)


def test_the_query_status_picks_the_curve() -> None:
    query = np.array([1.0] * 6 + [0.0] * 6)
    results = np.vstack([np.ones((6, 3)), np.zeros((6, 3))])
    results[0, 2] = 0.0  # one positive query's third result is negative
    found = status_curves(query, results, archive_prevalence=0.2, n_labelled=50)
    assert found.curve_for(1.0).probabilities == pytest.approx((1.0, 1.0, 5 / 6))
    assert found.curve_for(0.0).probabilities == (1.0, 1.0, 1.0)
    assert found.curve_for(None) is found.any_query
    assert found.curve_for(float("nan")) is found.any_query
    # 0.2 · 5/6 + 0.8 · 0 at rank 3
    assert found.any_query.at(3) == pytest.approx(0.2 * 5 / 6)
    assert found.any_query.at(4) is None


def test_a_status_with_too_few_queries_gets_no_curve() -> None:
    query = np.array([1.0] * 2 + [0.0] * 8)
    found = status_curves(query, np.zeros((10, 4)), archive_prevalence=0.1, n_labelled=40)
    assert found.positive is None and found.any_query is None
    assert found.negative is not None and found.negative.n_queries == 8


def test_a_rank_no_query_reached_is_unknown_not_zero() -> None:
    query = np.array([1.0] * 5 + [0.0] * 5)
    results = np.ones((10, 3))
    results[:, 2] = np.nan  # only two results per query
    found = status_curves(query, results, archive_prevalence=0.5, n_labelled=10)
    assert found.positive.at(2) == 1.0 and found.positive.at(3) is None


def test_the_sample_takes_both_statuses_evenly_where_it_can() -> None:
    status = statuses(np.array([1.0] * 30 + [0.0] * 300 + [np.nan] * 100 + [-1.0] * 20))
    picked = sample_queries(status, 100, seed=3)
    assert len(picked) == 100 and len(set(picked)) == 100
    assert np.sum(status[picked] == 1) == 30  # every positive: the rare status is not starved
    assert np.sum(status[picked] == 0) == 70
    assert not np.isnan(status[picked]).any()  # never an uncertain query
    small = sample_queries(status, 40, seed=3)
    assert np.sum(status[small] == 1) == 20 and np.sum(status[small] == 0) == 20


def test_a_ranking_by_status_is_sure_and_a_random_one_is_at_the_base_rate() -> None:
    rng = np.random.default_rng(1)
    n = 400
    ids = np.arange(1, n + 1)
    labels = rng.choice([1.0, 0.0, np.nan, -1.0], size=n, p=[0.3, 0.4, 0.25, 0.05])
    embeddings = rng.standard_normal((n, 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    status = statuses(labels)

    def by_status(image_id):
        row = image_id - 1
        same = np.nan_to_num(status == status[row]).astype(float)
        eligible = np.ones(n, bool)
        eligible[row] = False
        return same + 1e-3 * rng.random(n), eligible

    sure = calibrate(by_status, ids, labels, embeddings, top_k=10, n_queries=60)
    assert sure.positive.probabilities[0] == pytest.approx(1.0)
    assert sure.negative.probabilities[0] == pytest.approx(1.0)
    assert sure.n_queries == 60 and sure.positive.n_queries == 30

    def random(image_id):
        eligible = np.ones(n, bool)
        eligible[image_id - 1] = False
        return rng.random(n), eligible

    chance = calibrate(random, ids, labels, embeddings, top_k=10, n_queries=300)
    p = chance.prevalence
    assert abs(np.mean(chance.positive.probabilities) - p) < 0.1
    assert abs(np.mean(chance.negative.probabilities) - (1 - p)) < 0.1
    assert abs(np.mean(chance.any_query.probabilities) - p) < 0.1
    assert -1.0 <= chance.nearest_low <= 1.0
    assert calibrate(random, ids[:5], labels[:5], embeddings[:5], 3, 5) is None  # too few labels


def test_large_archives_sample_fewer_calibration_queries() -> None:
    from chexretrieve.search.calibration import queries_for

    assert queries_for(3_000, 200) == 200
    assert queries_for(1_000_000, 200) == 20
    assert queries_for(200_000, 200) == 100
    assert queries_for(1_000_000, 10) == 10


def _stored(values: dict, inputs: dict) -> dict:
    """A record sealed with the install's key as a faulty writer leaves it (values unchecked)."""
    import hashlib

    from chexretrieve.seal import canonical_json, seal

    digest = hashlib.sha256(canonical_json(values)).hexdigest()
    return {**values, "seal": seal("rank-calibration", {"values": digest}, inputs)}


def test_a_stored_calibration_is_read_back_only_when_sealed_and_sane() -> None:
    import json
    import re

    from chexretrieve.seal import SealError
    from chexretrieve.search.calibration import (
        RankCalibration,
        StatusCurve,
        calibration_from_record,
        calibration_record,
    )

    inputs = {"archive": "f" * 64, "geometry": "softmax", "finding": "Edema", "top_k": 3}
    made = RankCalibration(
        StatusCurve("positive", (0.9, 0.8, float("nan")), 10, 0.2),
        StatusCurve("negative", (0.95, 0.9, 0.9), 10, 0.8),
        StatusCurve("positive", (0.22, 0.3, 0.25), 20, 0.2),
        prevalence=0.2,
        n_labelled=400,
    )
    # strict JSON: NaN (a rank no query reached, no nearest cosine) is written as null
    record = json.loads(json.dumps(calibration_record(made, inputs), allow_nan=False))
    back = calibration_from_record(record, inputs)
    assert back.positive.probabilities[:2] == made.positive.probabilities[:2]
    assert np.isnan(back.positive.probabilities[2]) and np.isnan(back.nearest_low)
    assert back.negative == made.negative and back.any_query == made.any_query
    assert (back.prevalence, back.n_labelled) == (0.2, 400)
    with pytest.raises(SealError, match="other inputs"):
        calibration_from_record(record, {**inputs, "geometry": "gaussian"})
    edited = {**record, "negative": {**record["negative"], "probabilities": [0.99, 0.99, 0.99]}}
    with pytest.raises(SealError, match="changed after it was sealed"):
        calibration_from_record(edited, inputs)
    for curve, probabilities, words in (
        ("positive", [0.2, 0.9, 0.95], "positive curve's chances rise with the rank"),
        ("negative", [1e400, 0.5, 0.4], "not finite"),
        ("negative", [1.5, 0.5, 0.4], "outside [0, 1]"),
        ("any_query", [0.2, -0.1, 0.3], "outside [0, 1]"),
    ):
        values = {k: v for k, v in record.items() if k != "seal"}
        values[curve] = {**values[curve], "probabilities": probabilities}
        with pytest.raises(ValueError, match=re.escape(words)):
            calibration_from_record(_stored(values, inputs), inputs)
    # the upload curve is a mixture: it need not fall with the rank
    rising = {k: v for k, v in record.items() if k != "seal"}
    rising["any_query"] = {**rising["any_query"], "probabilities": [0.1, 0.2, 0.3]}
    assert calibration_from_record(_stored(rising, inputs), inputs).any_query.at(3) == 0.3
    missing = {k: v for k, v in record.items() if k not in ("seal", "prevalence")}
    with pytest.raises(ValueError, match="lacks or mistypes"):
        calibration_from_record(_stored(missing, inputs), inputs)


@pytest.mark.parametrize("seed", range(6))
def test_the_best_first_positions_equal_a_full_stable_sort(seed) -> None:
    """best_first (a partition, then a sort of the best) against NumPy's stable sort of every
    value: ties in position order, NaN last, k past the end, small integers (many ties)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    values = rng.integers(-5, 6, size=n).astype(np.float64)  # many ties
    if seed % 2:
        values[rng.random(n) < 0.3] = np.nan
    if seed == 4:
        values = rng.standard_normal(n).astype(np.float32)
    for k in (0, 1, 2, 7, 12, n - 1, n, n + 5):
        reference = np.argsort(-values, kind="stable")[: max(k, 0)]
        assert np.array_equal(best_first(values, k), reference), (seed, k)


def test_a_ranking_given_as_top_rows_calibrates_as_the_scores_it_comes_from() -> None:
    """``ranked_of`` (the service's top-k scan) gives the curves ``scores_of`` gives when it
    returns the rows a full stable sort of the same scores puts first (a naive argsort here);
    exactly one of the two must be given."""
    rng = np.random.default_rng(4)
    n = 300
    ids = np.arange(1, n + 1)
    labels = rng.choice([1.0, 0.0, np.nan], size=n, p=[0.3, 0.5, 0.2])
    embeddings = rng.standard_normal((n, 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    table = {int(i): rng.random(n) for i in ids}

    def scores_of(image_id):
        eligible = np.ones(n, bool)
        eligible[image_id - 1] = False
        return table[image_id], eligible

    def ranked_of(image_id, k):
        scores, eligible = scores_of(image_id)
        allowed = np.flatnonzero(eligible)
        return allowed[np.argsort(-scores[allowed], kind="stable")[:k]], eligible

    by_scores = calibrate(scores_of, ids, labels, embeddings, top_k=7, n_queries=80)
    by_rows = calibrate(None, ids, labels, embeddings, top_k=7, n_queries=80, ranked_of=ranked_of)
    for curve in ("positive", "negative", "any_query"):
        np.testing.assert_array_equal(
            getattr(by_rows, curve).probabilities, getattr(by_scores, curve).probabilities
        )
    assert by_rows.nearest_low == by_scores.nearest_low
    with pytest.raises(ValueError, match="exactly one of scores_of and ranked_of"):
        calibrate(scores_of, ids, labels, embeddings, 7, 80, ranked_of=ranked_of)
