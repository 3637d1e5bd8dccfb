"""The two-level bootstrap against a naive index-resampling implementation, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.evaluation.config import IntervalConfig
from chexretrieve.evaluation.intervals import bootstrap_mean, bootstrap_mean_of_findings


def _naive(values, n_boot, seed, shared):
    rng = np.random.default_rng(seed)
    c, q = values.shape
    reps = []
    for _ in range(n_boot):
        cells = rng.integers(0, c, c)
        if shared:
            queries = rng.integers(0, q, q)
            reps.append(values[np.ix_(cells, queries)].mean())
        else:
            reps.append(np.mean([values[i, rng.integers(0, q, q)].mean() for i in cells]))
    return np.quantile(reps, [0.025, 0.975])


@pytest.mark.parametrize("mode", ["shared", "per_cell"])
def test_matches_naive_resampling(mode):
    rng = np.random.default_rng(1)
    # cell effects + query effects + noise, like AP differences
    values = (
        rng.normal(0, 0.02, (6, 1)) + rng.normal(0.01, 0.05, (1, 40)) + rng.normal(0, 0.01, (6, 40))
    )
    config = IntervalConfig(n_bootstrap=3000, seed=3, query_resampling=mode)
    ours = bootstrap_mean(values, config)
    low, high = _naive(values, 3000, 11, shared=mode == "shared")
    width = high - low
    assert ours.mean == pytest.approx(values.mean())
    assert abs(ours.low - low) < 0.1 * width and abs(ours.high - high) < 0.1 * width


def test_shared_resampling_is_wider_when_queries_dominate():
    rng = np.random.default_rng(2)
    values = np.repeat(rng.normal(0, 0.1, (1, 30)), 8, axis=0) + rng.normal(0, 0.001, (8, 30))
    shared = bootstrap_mean(values, IntervalConfig(seed=0))
    per_cell = bootstrap_mean(values, IntervalConfig(seed=0, query_resampling="per_cell"))
    assert (shared.high - shared.low) > 2 * (per_cell.high - per_cell.low)


def test_seeded_and_degenerate_cases():
    values = np.random.default_rng(0).normal(size=(3, 10))
    a = bootstrap_mean(values, IntervalConfig(seed=4))
    b = bootstrap_mean(values, IntervalConfig(seed=4))
    assert a == b and a.low <= a.mean <= a.high
    constant = bootstrap_mean(np.full((2, 5), 0.25), IntervalConfig())
    assert constant.low == pytest.approx(0.25) and constant.high == pytest.approx(0.25)


def test_average_of_findings():
    rng = np.random.default_rng(3)
    m1, m2 = rng.normal(0.1, 0.05, (4, 10)), rng.normal(-0.1, 0.05, (4, 25))
    avg = bootstrap_mean_of_findings([m1, m2], IntervalConfig(seed=1))
    assert avg.mean == pytest.approx((m1.mean() + m2.mean()) / 2)
    assert avg.low < avg.mean < avg.high
    with pytest.raises(ValueError, match="same cells"):
        bootstrap_mean_of_findings([m1, m2[:3]], IntervalConfig())


def test_bad_input_messages():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean(np.zeros((0, 3)), IntervalConfig())
    with pytest.raises(ValueError, match="missing entries"):
        bootstrap_mean(np.array([[np.nan, 1.0]]), IntervalConfig())
    with pytest.raises(ValueError, match="query_resampling"):
        IntervalConfig(query_resampling="nested")


def _naive_cluster(values, clusters, config, seed_offset=0):
    """Reference cluster bootstrap written as a loop: the same RNG draws in the same order as the
    implementation (all cell draws first, then the patient draws), then each replicate's resampled
    entries listed one by one (every image of a drawn patient, once per draw) and averaged."""
    rng = np.random.default_rng([config.seed, seed_offset])
    n_cells, n_queries = values.shape
    patients = list(dict.fromkeys(clusters))  # first-appearance order
    images_of = {p: [q for q in range(n_queries) if clusters[q] == p] for p in patients}
    cell_draws = rng.integers(0, n_cells, size=(config.n_bootstrap, n_cells))
    uniform = [1.0 / len(patients)] * len(patients)
    if config.query_resampling == "shared":
        patient_counts = rng.multinomial(len(patients), uniform, size=config.n_bootstrap)
    reps = []
    for b in range(config.n_bootstrap):
        if config.query_resampling != "shared":
            per_cell = rng.multinomial(len(patients), uniform, size=n_cells)
        entries = []
        for i, cell in enumerate(cell_draws[b]):
            counts = patient_counts[b] if config.query_resampling == "shared" else per_cell[i]
            for p, count in zip(patients, counts, strict=True):
                for _ in range(count):
                    entries += [values[cell, q] for q in images_of[p]]
        reps.append(np.mean(entries))
    tail = (1 - config.confidence) / 2
    return np.quantile(reps, [tail, 1 - tail])


@pytest.mark.parametrize("mode", ["shared", "per_cell"])
def test_cluster_bootstrap_matches_a_naive_loop_over_resamples(mode):
    rng = np.random.default_rng(5)
    # 9 patients with 1-4 images each, interleaved (a frontal and its lateral need not be adjacent)
    clusters = np.array(list("ABCADBEFGHCAIEF"))
    patient_effect = {p: rng.normal(0, 0.1) for p in set(clusters)}
    values = np.array([[patient_effect[p] for p in clusters]]) + rng.normal(0, 0.02, (4, 15))
    config = IntervalConfig(n_bootstrap=300, seed=7, query_resampling=mode)
    ours = bootstrap_mean(values, config, seed_offset=3, clusters=clusters)
    low, high = _naive_cluster(values, list(clusters), config, seed_offset=3)
    assert ours.mean == pytest.approx(values.mean())
    assert ours.low == pytest.approx(low, abs=1e-12) and ours.high == pytest.approx(high, abs=1e-12)
    assert ours.n_patients == 9 and ours.n_queries == 15


def test_cluster_bootstrap_with_one_image_per_patient_is_the_ordinary_bootstrap():
    rng = np.random.default_rng(6)
    values = rng.normal(0, 0.05, (5, 30))
    for mode in ("shared", "per_cell"):
        config = IntervalConfig(n_bootstrap=400, seed=2, query_resampling=mode)
        ordinary = bootstrap_mean(values, config, seed_offset=4)
        by_patient = bootstrap_mean(
            values, config, seed_offset=4, clusters=[f"p{i}" for i in range(30)]
        )
        assert by_patient == ordinary


def test_patients_move_together_so_duplicated_images_do_not_narrow_the_interval():
    """Every patient imaged twice with the same value: the image bootstrap treats the copies as
    independent evidence and is narrower; the patient bootstrap equals the one-copy interval."""
    rng = np.random.default_rng(8)
    one = rng.normal(0, 0.1, (3, 20))
    twice = np.repeat(one, 2, axis=1)
    patients = np.repeat([f"p{i}" for i in range(20)], 2)
    config = IntervalConfig(n_bootstrap=2000, seed=1)
    single = bootstrap_mean(one, config)
    clustered = bootstrap_mean(twice, config, clusters=patients)
    images = bootstrap_mean(twice, config)
    np.testing.assert_allclose([clustered.low, clustered.high], [single.low, single.high])
    assert (images.high - images.low) < 0.85 * (clustered.high - clustered.low)


def test_a_finding_with_one_patient_gets_no_interval():
    values = np.random.default_rng(9).normal(size=(3, 4))
    one = bootstrap_mean(values, IntervalConfig(), clusters=["p1"] * 4)
    assert one.mean == pytest.approx(values.mean())
    assert not one.has_interval and np.isnan(one.low) and np.isnan(one.high)
    assert one.note == "1 patient among the queries; an interval needs at least 2"
    assert one.format() == f"{values.mean():+.3f} [n/a: {one.note}]"
    average = bootstrap_mean_of_findings(
        [values, values], IntervalConfig(), clusters=[["p1"] * 4, ["a", "b", "c", "d"]]
    )
    assert not average.has_interval and "of a finding" in average.note
    with pytest.raises(ValueError, match="one patient id per query column"):
        bootstrap_mean(values, IntervalConfig(), clusters=["p1"] * 3)
