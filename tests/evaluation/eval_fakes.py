"""Stand-ins for the evaluation tests: a tiny labelled archive and an anchor-projection geometry.

The real geometries live in chexretrieve.geometry; these stand-ins let the protocol, bootstrap and
report code be tested on arrays whose answers are known.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from chexretrieve.evaluation.inputs import AnchorBank, AnchorVariant, EncodedView
from chexretrieve.evaluation.protocol import LabelledArchive


class ProjectionGeometry:
    """cosine when ``basis`` is None; otherwise cosine after projecting onto span(basis)."""

    def __init__(self, basis: np.ndarray | None = None):
        if basis is None:
            self.q = None
        else:
            self.q, _ = np.linalg.qr(np.asarray(basis, dtype=np.float64).T)

    def features(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x if self.q is None else x @ self.q

    def score(self, fq: np.ndarray, fk: np.ndarray) -> np.ndarray:
        return fq @ fk.T


def projection_fitter(kind, anchors, inv_temperature=100.0, prior=None, **options):
    """fit_geometry stand-in: cosine ignores anchors; every other kind projects onto them."""
    if kind == "cosine":
        return ProjectionGeometry(None)
    basis = anchors if prior is None else np.concatenate([anchors, prior[:2]], axis=0)
    if "weights" in options and options["weights"] is not None:
        keep = np.asarray(options["weights"]) > 0
        basis = anchors[keep] if keep.any() else anchors
    return ProjectionGeometry(basis)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def toy_world(seed: int = 0, n_train: int = 120, n_valid: int = 80, dim: int = 16):
    """Images whose embedding carries a finding direction (axis 0) and a nuisance direction (axis 1)
    plus noise; finding anchors lie along +-axis 0 with jitter, nuisance anchors along +-axis 1.
    Images 2i and 2i + 1 belong to patient p<i> (the split boundary n_train is even, so no patient
    is in both splits); no view column (every image is used)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_valid
    effusion = rng.random(n) < 0.3
    view = rng.random(n) < 0.5
    emb = rng.normal(size=(n, dim)) * 0.6
    emb[:, 0] += np.where(effusion, 1.5, -1.5)
    emb[:, 1] += np.where(view, 2.0, -2.0)
    emb = unit(emb).astype(np.float32)
    labels = pd.DataFrame(
        {
            "Pleural Effusion": effusion.astype(float),
            "Cardiomegaly": (rng.random(n) < 0.2).astype(float),
            "projection": np.where(view, "AP", "PA"),
            "patient_id": [f"p{i // 2}" for i in range(n)],
        }
    )
    # some uncertain and blank training labels
    train_rows = np.arange(n_train)
    labels.loc[train_rows[:6], "Pleural Effusion"] = -1.0
    labels.loc[train_rows[6:10], "Pleural Effusion"] = np.nan
    splits = np.array(["train"] * n_train + ["valid"] * n_valid)
    archive = LabelledArchive(np.array([f"img{i:04d}" for i in range(n)]), splits, labels)

    def anchors(axis: int, count: int, seed_: int) -> np.ndarray:
        """Half "finding present" (+axis), half "absent" (-axis) sentences, with jitter."""
        r = np.random.default_rng(seed_)
        a = r.normal(size=(count, dim)) * 0.3
        a[:, axis] += np.where(np.arange(count) % 2 == 0, 3.0, -3.0)
        return unit(a).astype(np.float32)

    bank = AnchorBank(
        findings={
            "Pleural Effusion": tuple(
                AnchorVariant(f"v{i}", anchors(0, 6, 100 + i)) for i in range(3)
            ),
            "Cardiomegaly": tuple(AnchorVariant(f"v{i}", anchors(2, 6, 200 + i)) for i in range(3)),
        },
        broad=unit(rng.normal(size=(20, dim))).astype(np.float32),
        nuisance={"projection": anchors(1, 6, 300)},
    )
    view_ = EncodedView("toy:0", 100.0, emb, bank)
    return archive, view_
