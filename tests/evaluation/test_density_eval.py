"""The density evaluation's metrics and decomposition against naive references, its images, and
the command end to end on a tiny world."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import ive, logsumexp
from scipy.stats import entropy as scipy_entropy
from scipy.stats import vonmises_fisher
from sklearn.metrics import roc_auc_score

from chexretrieve.evaluation.density_claims import decomposition_verdict
from chexretrieve.evaluation.density_data import WorldEmbeddings
from chexretrieve.evaluation.density_decomposition import (
    PolarAnchors,
    component_names,
    decomposition_rows,
    naming_summary,
    posterior_stats,
    purity,
    structureless_control,
)
from chexretrieve.evaluation.density_images import (
    DISPLAY_ERRORS,
    NEAR_IMAGE_SHIFTS,
    display_error,
    distinct_images,
    lateral_phantom,
    near_shift,
    same_picture,
)
from chexretrieve.evaluation.density_metrics import (
    auroc,
    bootstrap_auroc,
    fpr_at_95_tpr,
    weighted_auroc,
)
from chexretrieve.evaluation.density_models import fit_density_models
from chexretrieve.evaluation.density_selection import select_k, tempered_heldout
from chexretrieve.evaluation.density_tail import matched_auroc
from chexretrieve.findings import FINDINGS


# ------------------------------------------------------------------------------------ metrics
def test_auroc_and_weighted_auroc_match_sklearn_with_ties():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 40).astype(float), rng.integers(0, 4, 60).astype(float)
    labels = np.r_[np.ones(40), np.zeros(60)]
    assert auroc(pos, neg) == pytest.approx(roc_auc_score(labels, np.r_[pos, neg]))
    w_pos, w_neg = rng.integers(0, 3, (4, 40)).astype(float), rng.integers(0, 3, (4, 60))
    values = weighted_auroc(pos, neg, w_pos, w_neg.astype(float))
    for b in range(4):
        weights = np.r_[w_pos[b], w_neg[b]]
        expected = roc_auc_score(labels, np.r_[pos, neg], sample_weight=weights)
        assert values[b] == pytest.approx(expected)


def test_bootstrap_resamples_clusters_together():
    rng = np.random.default_rng(1)
    sources = rng.normal(0.8, 1.0, 10)
    pos = np.repeat(sources, 10) + rng.normal(0, 0.01, 100)  # 10 pictures, 10 copies each
    neg = rng.normal(0, 1, 300)
    point, low, high = bootstrap_auroc(pos, neg, np.repeat(np.arange(10), 10), seed=0)
    _, low_naive, high_naive = bootstrap_auroc(pos, neg, seed=0)
    assert low <= point <= high
    assert high - low > 1.5 * (high_naive - low_naive)  # ten pictures are not a hundred


def test_fpr95_is_the_share_of_negatives_at_the_95_percent_recall_threshold():
    pos = np.arange(100, dtype=float)  # 95 % of positives are >= 5
    neg = np.array([4.0, 5.0, 6.0, 50.0])
    assert fpr_at_95_tpr(pos, neg) == pytest.approx(3 / 4)


def test_matched_auroc_is_the_within_stratum_pair_statistic():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=60)
    rare = rng.random(60) < 0.3
    strata = rng.integers(0, 3, 60)
    wins = pairs = 0.0
    for i in range(60):  # naive: every (rare, not rare) pair of one stratum
        for j in range(60):
            if rare[i] and not rare[j] and strata[i] == strata[j]:
                pairs += 1
                wins += 1.0 if scores[i] < scores[j] else 0.5 if scores[i] == scores[j] else 0.0
    assert matched_auroc(scores, rare, strata)[0] == pytest.approx(wins / pairs)


def test_purity_against_a_hand_count():
    truth = pd.DataFrame(0.0, index=range(6), columns=list(FINDINGS))
    truth.loc[[0, 1, 2], "Edema"] = 1.0
    assert purity(np.array([0, 0, 0, 1, 1, 1]), truth) == pytest.approx((1.0, (0.5 + 12) / 13))
    mixed = purity(np.array([0, 1, 0, 1, 0, 1]), truth)[0]
    assert mixed == pytest.approx((0.5 * 2 / 3 + 0.5 * 2 / 3 + 12) / 13)


# ------------------------------------------------------------------------- decomposition
def _naive_posterior(model, x, temperature=1.0):
    d, nu = model.dim, model.dim / 2 - 1
    kappa = model.concentrations / temperature
    log_c = nu * np.log(kappa) - (d / 2) * np.log(2 * np.pi) - (np.log(ive(nu, kappa)) + kappa)
    joint = np.log(model.weights) + log_c + (x @ model.directions.T) * kappa
    return np.exp(joint - logsumexp(joint, axis=1, keepdims=True))


def _world(rows, heldout, truth=None, heldout_truth=None, d=None):
    d = rows.shape[1]
    truth = truth if truth is not None else pd.DataFrame(0.0, index=range(len(rows)),
                                                         columns=list(FINDINGS))  # fmt: skip
    heldout_truth = heldout_truth if heldout_truth is not None else truth.iloc[: len(heldout)]
    return WorldEmbeddings(
        "fake", 9, rows.astype(np.float32), truth.reset_index(drop=True),
        heldout.astype(np.float32), heldout_truth.reset_index(drop=True),
        heldout[:5].astype(np.float32), np.zeros((0, d), np.float32), np.array([]),
        np.array([]), np.array([], dtype=int),
    )  # fmt: skip


def _graded_world(seed, count):
    """Four heavily overlapping vMF components: an image is a blend of several."""
    rng = np.random.default_rng(seed)
    means = np.eye(16)[0] + 0.3 * np.eye(16)[1:5]
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    labels = rng.integers(0, 4, count)
    return np.vstack([vonmises_fisher(means[k], 20.0).rvs(1, random_state=rng) for k in labels])


def _hard_world(seed, count):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, count)
    return np.vstack([vonmises_fisher(np.eye(16)[k], 400.0).rvs(1, random_state=rng)
                      for k in labels])  # fmt: skip


def test_posterior_stats_against_scipy_entropy():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(6, 0.3), size=50)
    stats = posterior_stats(p)
    naive = scipy_entropy(p, axis=1)
    assert stats["mean entropy (nats)"] == pytest.approx(naive.mean())
    assert stats["effective components exp(H)"] == pytest.approx(np.exp(naive).mean())
    assert stats["share with top > 0.99"] == pytest.approx((p.max(axis=1) > 0.99).mean())


@pytest.mark.parametrize(("make", "graded"), [(_graded_world, True), (_hard_world, False)])
def test_entropy_against_the_structureless_control(make, graded):
    archive, heldout = make(0, 600), make(1, 200)
    world = _world(archive, heldout)
    models = fit_density_models(archive, (1, 2, 4, 8), 0, n_components=4)
    rows = pd.DataFrame(decomposition_rows(world, models, 0))
    plain = rows[rows["responsibilities"] == "T = 1"].set_index("cloud")
    # the archive's entropy, recomputed naively from the fitted parameters
    naive = scipy_entropy(_naive_posterior(models.movmf, heldout), axis=1).mean()
    assert plain.loc["phantom archive", "mean entropy (nats)"] == pytest.approx(naive, rel=1e-6)
    # the control, recomputed the same way from its own fit
    k = models.n_components
    fitted, _, _, test = structureless_control(world.archive, len(heldout), k, 0)
    control = scipy_entropy(_naive_posterior(fitted, test), axis=1).mean()
    assert plain.loc["structureless control", "mean entropy (nats)"] == pytest.approx(control)
    purity_rows = pd.DataFrame(
        [{"assignment": "movmf top component", "finding purity": 1.0},
         {"assignment": "spherical k-means (same K)", "finding purity": 0.5}]
    )  # fmt: skip
    verdict = decomposition_verdict(rows, purity_rows)
    assert verdict["graded"] is graded, (naive, control)


def test_tempered_heldout_against_a_naive_log_density():
    x = _hard_world(4, 300)
    model = fit_density_models(x, (4,), 0, n_components=4).movmf
    curve = tempered_heldout(model, x[:50], temperatures=(1.0, 2.0))
    for t in (1.0, 2.0):
        d, nu = model.dim, model.dim / 2 - 1
        kappa = model.concentrations / t
        log_c = nu * np.log(kappa) - (d / 2) * np.log(2 * np.pi) - (np.log(ive(nu, kappa)) + kappa)
        naive = logsumexp(np.log(model.weights) + log_c + (x[:50] @ model.directions.T) * kappa, 1)
        assert curve[t] == pytest.approx(naive.mean())


def test_select_k_extends_the_range_until_the_curve_turns():
    x = _hard_world(5, 400)  # four clusters: the curve turns well inside 1..64
    selection = select_k(x, (1, 2), seed=0)
    assert selection.shape == "turned"
    assert max(selection.curve) > selection.chosen and 3 <= selection.chosen <= 16
    ordered = sorted(selection.curve)
    assert ordered[:2] == [1, 2] and len(ordered) >= 4  # extended beyond the two given


def test_naming_polarity_agreement_by_hand():
    archive = _hard_world(6, 400)
    labels = np.argmax(archive @ np.eye(16)[:4].T, axis=1)
    truth = pd.DataFrame(0.0, index=range(400), columns=list(FINDINGS))
    truth.loc[labels == 0, "Edema"] = 1.0  # component of axis 0: Edema; the others No Finding
    world = _world(archive, archive[:50], truth)
    models = fit_density_models(archive, (4,), 0, n_components=4)
    d = archive.shape[1]
    anchors = PolarAnchors(
        ("Edema", "Edema", "Edema", "Edema", "Fracture"),
        ("positive", "negative", "negative", "negative", "positive"),
        ("edema", "no edema 1", "no edema 2", "no edema 3", "fracture"),
        np.vstack([np.eye(d)[0], np.eye(d)[1], np.eye(d)[2], np.eye(d)[3], np.eye(d)[10]]),
    )
    table = component_names(world, models, anchors)
    edema = table[table["dominant true labels"] == "Edema"]
    assert len(edema) == 1 and edema["nearest positive anchor"].iloc[0] == "Edema: edema"
    assert bool(edema["anchor agrees with labels"].iloc[0])
    normal = table[table["dominant true labels"] == "No Finding"]
    assert len(normal) == 3 and normal["anchor agrees with labels"].all()
    summary = naming_summary(world, models, anchors, 0)
    assert summary["anchor agreement"] == 1.0 and summary["anchor agreement by chance"] < 1.0


# ------------------------------------------------------------------------------------ images
def test_shifts_and_lateral_renders_are_valid_and_differ_from_the_source():
    from chexretrieve.phantom import PhantomConfig, generate_case

    base = generate_case(2, 0, PhantomConfig(size=128)).image
    rng = np.random.default_rng(0)
    for kind in NEAR_IMAGE_SHIFTS:
        shifted = near_shift(base, kind, rng)
        assert shifted.shape == base.shape and 0 <= shifted.min() and shifted.max() <= 1
        assert np.abs(shifted - base).mean() > 1e-3, kind
    for kind in DISPLAY_ERRORS:
        assert display_error(base, kind).shape == base.shape[::-1] or kind != "rotated 90 degrees"
    np.testing.assert_array_equal(display_error(base, "mirrored left-right"), base[:, ::-1])
    lateral = lateral_phantom(2, 0, 64)
    assert lateral.shape == (64, 64) and 0.1 < lateral.mean() < 0.9
    np.testing.assert_array_equal(lateral, lateral_phantom(2, 0, 64))  # deterministic
    with pytest.raises(ValueError, match="unknown near shift"):
        near_shift(base, "sepia", rng)


def test_same_picture_finds_encodings_and_crops_but_not_other_pictures():
    rng = np.random.default_rng(7)
    picture = np.clip(
        np.cumsum(np.cumsum(rng.normal(size=(120, 90)), axis=0), axis=1) / 300 + 0.5, 0, 1
    )
    assert same_picture(picture, np.clip(picture + rng.normal(0, 0.02, picture.shape), 0, 1))
    assert same_picture(picture, picture[20:80])  # a crop along one axis
    other = np.clip(np.cumsum(np.cumsum(rng.normal(size=(120, 90)), 0), 1) / 300 + 0.5, 0, 1)
    assert not same_picture(picture, other)
    groups = distinct_images([("a", picture), ("b", other), ("c", picture.copy())])
    assert [names for _, _, names in groups] == [("a", "c"), ("b",)]


def test_pydicom_data_files_are_deduplicated_by_content():
    pytest.importorskip("data_store")
    from chexretrieve.evaluation.density_images import dicom_sample_files

    files = [(n, im) for n, im in dicom_sample_files() if not n.startswith("RG1")]
    groups = distinct_images(files)
    names = {first.split(" ")[0]: set(n.split(" ")[0] for n in all_names)
             for first, _, all_names in groups}  # fmt: skip
    rg3 = {"RG3_J2KI.dcm", "RG3_J2KR.dcm", "RG3_UNCI.dcm", "RG3_UNCR.dcm"}
    assert rg3 in names.values()  # four encodings of the extremity film: one picture
    assert {"MR2_J2KI.dcm", "MR2_J2KR.dcm", "MR2_UNCI.dcm", "MR2_UNCR.dcm"} in names.values()
    assert len(groups) < len(files) / 2


def test_run_verdicts_need_every_run_to_agree():
    from chexretrieve.evaluation.density_claims import run_verdict

    assert run_verdict(0, 27, 27, [-0.1] * 27) == "does not hold"
    assert run_verdict(27, 0, 27, [0.1] * 27) == "holds"
    assert run_verdict(16, 0, 27, [0.05] * 27) == "holds on average"
    assert run_verdict(0, 23, 27, [-0.03] * 27) == "does not hold on average"
    assert run_verdict(3, 0, 27, [0.02] * 26 + [-0.01]) == "not decided"
    assert run_verdict(2, 1, 27, [0.02] * 27) == "not decided"
