"""The known-answer worlds give the expected winner, scored against independent references.

The Gaussian's log-density is recomputed with scikit-learn's Ledoit–Wolf covariance and scipy's
multivariate normal, AUROC with scikit-learn's roc_auc_score; the mixture is ours (the code under
test), so its typicality is recomputed naively from its parameters (vMF log-normaliser by
scipy.special.ive) before scoring.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ive, logsumexp
from scipy.stats import multivariate_normal
from sklearn.covariance import LedoitWolf
from sklearn.metrics import roc_auc_score

from chexretrieve.evaluation.density_known import (
    EXPECTED,
    WIN_MARGIN,
    check_winners,
    known_answer_rows,
    known_worlds,
)
from chexretrieve.evaluation.density_models import fit_density_models

SCALE = 3  # 500 archive, 200 held-out, 100 OOD points per world


def _naive_vmf_log_density(model, x):
    d = model.dim
    nu = d / 2 - 1
    kappa = model.concentrations
    log_c = nu * np.log(kappa) - (d / 2) * np.log(2 * np.pi) - (np.log(ive(nu, kappa)) + kappa)
    joint = np.log(model.weights) + log_c + (x @ model.directions.T) * kappa
    return logsumexp(joint, axis=1)


def _naive_gaussian_log_density(archive, x):
    fit = LedoitWolf().fit(archive)
    return multivariate_normal(fit.location_, fit.covariance_).logpdf(x)


def _auroc(ood_low, held_low):
    labels = np.r_[np.ones(len(ood_low)), np.zeros(len(held_low))]
    return roc_auc_score(labels, np.r_[ood_low, held_low])


@pytest.mark.parametrize("seed", [0, 1])
def test_each_world_has_its_expected_winner_by_naive_references(seed):
    for world in known_worlds(seed, scale=SCALE):
        models = fit_density_models(world.archive, (1, 2, 4, 8, 16, 32), seed)
        mixture = {
            part: -_naive_vmf_log_density(models.movmf, rows)
            for part, rows in (("ood", world.ood), ("held", world.heldout))
        }
        gaussian = {
            part: -_naive_gaussian_log_density(world.archive, rows)
            for part, rows in (("ood", world.ood), ("held", world.heldout))
        }
        movmf_auc = _auroc(mixture["ood"], mixture["held"])
        gaussian_auc = _auroc(gaussian["ood"], gaussian["held"])
        if EXPECTED[world.name] == "movmf":
            assert movmf_auc > gaussian_auc + WIN_MARGIN, (world.name, movmf_auc, gaussian_auc)
        else:
            assert gaussian_auc > movmf_auc + WIN_MARGIN, (world.name, movmf_auc, gaussian_auc)
        # the code's own scores give the same AUROCs as the references
        np.testing.assert_allclose(
            models.scores["movmf"](world.ood), -mixture["ood"], rtol=1e-9, atol=1e-6
        )
        np.testing.assert_allclose(
            models.scores["gaussian"](world.ood), -gaussian["ood"], rtol=1e-6, atol=1e-6
        )


def test_the_stretched_world_differs_only_in_the_direction_of_its_stretch():
    world = known_worlds(0, scale=1)[1]
    # the same angular distance from e1 in distribution (medians within a few per cent)
    inside, outside = np.median(world.heldout[:, 0]), np.median(world.ood[:, 0])
    assert abs(inside - outside) < 0.01
    # but the long axes moved: variance along axes 1..12 vs 13..24 swaps
    assert world.archive[:, 1:13].var() > 3 * world.archive[:, 13:25].var()
    assert world.ood[:, 13:25].var() > 3 * world.ood[:, 1:13].var()


def test_check_winners_passes_and_fails_as_the_numbers_say():
    rows = known_answer_rows(0, (1, 2, 4, 8, 16, 32), scale=SCALE)
    checks = check_winners(rows)
    assert {c["world"] for c in checks} == set(EXPECTED)
    assert all(c["check"] == "passed" for c in checks)
    swapped = [
        {**r, "model": {"movmf": "gaussian", "gaussian": "movmf"}.get(r["model"], r["model"])}
        for r in rows
    ]
    assert all(c["check"] == "FAILED" for c in check_winners(swapped))
