"""The deployed OOD model is the one the committed density evaluation supports (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path

from chexretrieve.density import DensityConfig

MANIFEST = Path(__file__).resolve().parents[2] / "eval/reports/density-phantom/manifest.json"


def test_the_default_ood_model_is_the_one_the_committed_evaluation_supports():
    """Regenerating eval/reports/density-phantom with another verdict makes this fail until
    DensityConfig.ood_model is revisited."""
    chosen = json.loads(MANIFEST.read_text())["checks"]["ood_model"]
    assert chosen["decided"] and DensityConfig().ood_model == chosen["model"]
    assert chosen["share of runs Gaussian ahead on near shifts"] >= 0.9
