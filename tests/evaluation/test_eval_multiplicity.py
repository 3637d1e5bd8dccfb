"""Holm's adjustment of the per-finding verdicts against a naive step-down reference, and the
bootstrap p-values they adjust."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from chexretrieve.evaluation.config import IntervalConfig
from chexretrieve.evaluation.intervals import bootstrap_mean, bootstrap_p
from chexretrieve.evaluation.multiplicity import add_holm, holm_adjust, verdict, verdict_counts


def naive_holm_rejections(p_values, alpha):
    """Holm (1979) as written: sort ascending; reject H_(i) while p_(i) <= alpha / (m - i + 1)
    (i counted from 1); stop at the first that is not rejected."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = [False] * m
    for rank, index in enumerate(order, start=1):
        if p_values[index] <= alpha / (m - rank + 1):
            rejected[index] = True
        else:
            break
    return rejected


def naive_holm_adjusted(p_values):
    """Adjusted p-values by their definition: the smallest alpha at which Holm rejects each."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, index in enumerate(order, start=1):
        running = max(running, min(1.0, (m - rank + 1) * p_values[index]))
        adjusted[index] = running
    return adjusted


@pytest.mark.parametrize("seed", range(20))
def test_holm_matches_the_naive_step_down_procedure(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 20))
    p = rng.choice([rng.random(m) * 0.06, rng.random(m), rng.beta(0.3, 3, m)])
    if seed % 4 == 0:
        p[: m // 2] = p[0]  # ties
    adjusted = holm_adjust(p)
    np.testing.assert_allclose(adjusted, naive_holm_adjusted(list(p)), rtol=0, atol=1e-15)
    for alpha in (0.01, 0.05, 0.1):
        assert list(adjusted <= alpha) == naive_holm_rejections(list(p), alpha)


def test_holm_leaves_missing_p_values_out_of_the_family():
    p = np.array([0.01, np.nan, 0.04, 0.03])
    adjusted = holm_adjust(p)
    assert np.isnan(adjusted[1])
    np.testing.assert_allclose(adjusted[[0, 2, 3]], naive_holm_adjusted([0.01, 0.04, 0.03]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_adjust([0.2, 1.5])
    assert np.isnan(holm_adjust([np.nan])).all()


def test_thirteen_findings_at_the_edge_need_the_adjustment():
    """Five per-finding p-values below 0.05; Holm over 13 findings keeps the two smallest."""
    p = [0.001, 0.003, 0.012, 0.02, 0.04] + [0.3] * 8
    adjusted = holm_adjust(p)
    assert (np.array(p) < 0.05).sum() == 5
    assert list(np.flatnonzero(adjusted <= 0.05)) == [0, 1]


def _differences():
    rows = []
    for reference, ps in (("cosine", [0.002, 0.002, 0.03, 0.5]), ("iti", [0.002, 0.4, 0.6, 0.01])):
        for i, p in enumerate(ps):
            mean = -0.1 if (reference, i) == ("iti", 3) else 0.05
            rows.append(
                {"finding": f"F{i}", "geometry": "softmax", "reference": reference, "mean": mean,
                 "low": mean - 0.01 if p < 0.05 else -0.01, "high": 0.2 if mean > 0 else -0.05,
                 "p_value": p}
            )  # fmt: skip
        rows.append(
            {"finding": "Average", "geometry": "softmax", "reference": reference, "mean": 0.04,
             "low": 0.01, "high": 0.07, "p_value": 0.002}
        )  # fmt: skip
    return pd.DataFrame(rows)


def test_add_holm_adjusts_each_comparison_over_its_findings_only():
    out = add_holm(_differences())
    cosine = out[(out["reference"] == "cosine") & (out["finding"] != "Average")]
    np.testing.assert_allclose(cosine["p_holm"], naive_holm_adjusted([0.002, 0.002, 0.03, 0.5]))
    assert list(cosine["verdict"]) == ["holds", "holds", "not shown", "not shown"]
    iti = out[(out["reference"] == "iti") & (out["finding"] != "Average")]
    assert list(iti["verdict"]) == ["holds", "not shown", "not shown", "reversed"]
    average = out[out["finding"] == "Average"]
    assert average["p_holm"].isna().all() and (average["verdict"] == "").all()
    counts = verdict_counts(out).set_index("reference")
    assert counts.loc["cosine", "interval above 0 (unadjusted)"] == 3
    assert counts.loc["cosine", "holds after Holm"] == 2
    assert counts.loc["iti", "reversed after Holm"] == 1
    assert verdict(0.1, np.nan) == "n/a"


def test_bootstrap_p_inverts_the_percentile_interval():
    assert bootstrap_p(np.full(999, 0.2)) == pytest.approx(2 / 1000)
    assert bootstrap_p(np.linspace(-1, 1, 1001)) == 1.0
    reps = np.concatenate([np.full(20, -0.1), np.full(980, 0.1)])
    assert bootstrap_p(reps) == pytest.approx(2 * 21 / 1001)
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.05, 0.15, 0.3):
        values = rng.normal(shift, 1.0, size=(4, 60))
        interval = bootstrap_mean(values, IntervalConfig(n_bootstrap=2000, seed=1))
        excludes = interval.low > 0 or interval.high < 0
        # the interval excludes 0 exactly when fewer than 2.5% of replicates lie beyond 0, which
        # gives p below 0.05 (up to the +1 of the observed sample)
        assert excludes == (interval.p_value < 0.05) or abs(interval.p_value - 0.05) < 0.003
