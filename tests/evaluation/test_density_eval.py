"""The density evaluation's metrics against naive references, and its tables on a built world."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import vonmises_fisher
from sklearn.metrics import roc_auc_score

from chexretrieve.evaluation.density_claims import claims_text
from chexretrieve.evaluation.density_commands import write_density_report
from chexretrieve.evaluation.density_data import DensitySets, phantom_transforms, synthetic_images
from chexretrieve.evaluation.density_eval import (
    _purity,
    auroc,
    decomposition_table,
    fit_models,
    fpr_at_95_tpr,
    long_tail_table,
    ood_tables,
)
from chexretrieve.findings import FINDINGS


def test_auroc_matches_sklearn_with_ties():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 40).astype(float), rng.integers(0, 4, 60).astype(float)
    labels = np.r_[np.ones(40), np.zeros(60)]
    assert auroc(pos, neg) == pytest.approx(roc_auc_score(labels, np.r_[pos, neg]))


def test_fpr95_is_the_share_of_negatives_at_the_95_percent_recall_threshold():
    pos = np.arange(100, dtype=float)  # 95 % of positives are >= 5
    neg = np.array([4.0, 5.0, 6.0, 50.0])
    assert fpr_at_95_tpr(pos, neg) == pytest.approx(3 / 4)
    assert np.mean(pos >= 5.0) >= 0.95


def test_purity_against_a_hand_count():
    truth = pd.DataFrame(0.0, index=range(6), columns=list(FINDINGS))
    truth.loc[[0, 1, 2], "Edema"] = 1.0
    assignment = np.array([0, 0, 0, 1, 1, 1])
    purity, base = _purity(assignment, truth)
    # Edema is perfectly separated (1.0; base 0.5); the 12 other findings are all 0 (1.0)
    assert purity == pytest.approx(1.0)
    assert base == pytest.approx((0.5 + 12) / 13)
    mixed = np.array([0, 1, 0, 1, 0, 1])
    assert _purity(mixed, truth)[0] == pytest.approx((0.5 * 2 / 3 + 0.5 * 2 / 3 + 12) / 13)


def test_renders_and_synthetic_images_are_valid_images():
    image = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    renders = phantom_transforms([image] * 4)
    assert [n for n, _ in renders] == [
        "rotated 90 degrees",
        "upside down",
        "grey levels inverted",
        "chest cropped away",
    ]
    np.testing.assert_array_equal(renders[0][1], np.rot90(image))
    for _, im in renders + synthetic_images(12, 64, 0):
        assert im.shape == (64, 64) and 0 <= im.min() and im.max() <= 1


def _world(tmp_path):
    rng = np.random.default_rng(3)
    d = 12
    centres = np.eye(d)[:3]
    kinds = rng.integers(0, 3, 500)
    rows = np.vstack([vonmises_fisher(centres[k], 80.0).rvs(1, random_state=rng) for k in kinds])
    truth = pd.DataFrame(0.0, index=range(500), columns=list(FINDINGS))
    truth.loc[kinds == 1, "Edema"] = 1.0
    truth.loc[kinds == 2, "Cardiomegaly"] = 1.0
    rare = np.flatnonzero(kinds == 2)[:3]  # a rare combination: Cardiomegaly + Fracture
    truth.loc[rare, "Fracture"] = 1.0
    ood = vonmises_fisher(np.eye(d)[5], 80.0).rvs(30, random_state=rng)
    return DensitySets(
        "fake",
        rows[:400].astype(np.float32),
        rows[400:].astype(np.float32),
        truth.iloc[:400].reset_index(drop=True),
        truth.iloc[400:].reset_index(drop=True),
        ood.astype(np.float32),
        np.array(["far"] * 30),
        np.array([f"far {i}" for i in range(30)]),
        np.zeros((0, d), np.float32),
        np.array([], dtype=str),
    )


def test_tables_and_claims_on_a_world_with_known_structure(tmp_path):
    sets = _world(tmp_path)
    models = fit_models(sets.archive, (1, 2, 3, 4, 6), seed=0)
    assert models.movmf.n_components in (3, 4)
    ood, flags, by_kind = ood_tables(sets, models)
    top = ood.set_index(["model", "OOD group"])
    assert top.loc[("movmf", "all OOD"), "AUROC"] == pytest.approx(1.0)
    assert flags.loc["movmf", "far flagged"] == 1.0
    assert (by_kind["movmf"] == 1.0).all() and (by_kind["n"] == 1).all() and len(by_kind) == 30
    assert flags.loc["movmf", "held-out phantoms flagged"] <= 0.05
    parts = decomposition_table(sets, models, 0)
    assert parts.loc["movmf top component", "finding purity"] > 0.99
    assert parts.loc["movmf top component", "mean components for 90 % posterior"] < 1.2
    tail = long_tail_table(sets, models, rare_max=5)
    tables = {
        "ood_auroc_fpr95": top,
        "ood_flag_rates": flags,
        "long_tail": tail,
        "decomposition": parts,
    }
    text = claims_text(tables)
    assert "1. **Better OOD detection" in text and "3. **A sparse decomposition" in text
    write_density_report(tmp_path / "report", "chexretrieve eval density", {
        "encoder": "fake", "phantom_seed": 2, "n_archive": 400, "n_heldout": 100, "n_ood": 30,
        "chosen_K": models.movmf.n_components, "total_seconds": 1.0}, tables)  # fmt: skip
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Command: `chexretrieve eval density`" in report and "| movmf | all OOD |" in report
    assert (tmp_path / "report" / "tables" / "long_tail.csv").is_file()
