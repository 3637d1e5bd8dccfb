"""Two worlds whose OOD answer is known, run by ``eval density`` beside the phantoms.

Whether a vMF mixture or a Gaussian detects OOD points better is decided by the *shape* of the
embedding cloud. Each world is built so that one of them must win; the command checks that it
does (a failure means the models or the metric are broken, not that the world is surprising):

* **vMF mixture** (expected: MovMF): the archive is drawn from K = 6 vMF components on S^31
  (random mean directions, κ = 150); the OOD points from vMFs of the same κ centred on the
  normalised midpoints of pairs of component means: between the clusters, where a Gaussian fitted
  to the whole cloud puts much of its mass and the mixture almost none.
* **stretched Gaussian cloud** (expected: Gaussian): the archive is x = (3 e₁ + D z) / ‖·‖ with
  z ~ N(0, I) and D diagonal: 0 along e₁, 0.5 along twelve directions, 0.2 along the others: a
  cap on S^31 stretched along twelve directions; the OOD points the same with the long directions
  moved to twelve others. Both clouds lie at the same angle from e₁ (the same radial
  distribution); only the direction of the stretch tells them apart, which a full covariance sees
  and isotropic vMF components cannot tile in twelve dimensions (a three-dimensional stretch they
  can: 96 components detected one at AUROC 0.99 while this world was designed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: dimension, archive, held-out and OOD sizes of both worlds
DIM = 32
N_ARCHIVE = 1500
N_HELDOUT = 600
N_OOD = 300
#: the vMF world's components and their concentration
VMF_COMPONENTS = 6
VMF_CONCENTRATION = 150.0
#: the stretched world's long and short scales and the mean direction's length
LONG_SCALE, SHORT_SCALE, MEAN_LENGTH = 0.5, 0.2, 3.0
#: how many directions are long (in the archive: 1..12; in the OOD points: 13..24)
LONG_AXES = 12
#: what each world must show: (world, the model that must win)
EXPECTED = {"vMF mixture": "movmf", "stretched Gaussian cloud": "gaussian"}
#: the expected winner must beat the other by at least this AUROC
WIN_MARGIN = 0.05


@dataclass(frozen=True)
class KnownWorld:
    name: str
    archive: np.ndarray
    heldout: np.ndarray
    ood: np.ndarray


def _vmf(mean, kappa, count, rng) -> np.ndarray:
    from scipy.stats import vonmises_fisher

    return np.atleast_2d(vonmises_fisher(mean, kappa).rvs(count, random_state=rng))


def vmf_mixture_world(seed: int, dim: int = DIM, scale: int = 1) -> KnownWorld:
    """The vMF-mixture world (module text); ``scale`` divides every set's size (tests)."""
    rng = np.random.default_rng([seed, 1])
    means = rng.standard_normal((VMF_COMPONENTS, dim))
    means /= np.linalg.norm(means, axis=1, keepdims=True)

    def draw(count):
        labels = rng.integers(0, VMF_COMPONENTS, count)
        out = np.empty((count, dim))
        for k in range(VMF_COMPONENTS):
            picked = labels == k
            if picked.any():
                out[picked] = _vmf(means[k], VMF_CONCENTRATION, int(picked.sum()), rng)
        return out

    pairs = [(a, b) for a in range(VMF_COMPONENTS) for b in range(a + 1, VMF_COMPONENTS)]
    ood_count = N_OOD // scale
    choice = rng.integers(0, len(pairs), ood_count)
    ood = np.empty((ood_count, dim))
    for i, p in enumerate(choice):
        middle = means[pairs[p][0]] + means[pairs[p][1]]
        ood[i] = _vmf(middle / np.linalg.norm(middle), VMF_CONCENTRATION, 1, rng)[0]
    return KnownWorld("vMF mixture", draw(N_ARCHIVE // scale), draw(N_HELDOUT // scale), ood)


def stretched_gaussian_world(seed: int, dim: int = DIM, scale: int = 1) -> KnownWorld:
    """The stretched-Gaussian world (module text)."""
    rng = np.random.default_rng([seed, 2])
    mean = np.zeros(dim)
    mean[0] = MEAN_LENGTH

    def draw(count, long_axes):
        scales = np.full(dim, SHORT_SCALE)
        scales[0] = 0.0
        scales[list(long_axes)] = LONG_SCALE
        rows = mean + rng.standard_normal((count, dim)) * scales
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    inside = range(1, 1 + LONG_AXES)
    outside = range(1 + LONG_AXES, 1 + 2 * LONG_AXES)
    return KnownWorld(
        "stretched Gaussian cloud",
        draw(N_ARCHIVE // scale, inside),
        draw(N_HELDOUT // scale, inside),
        draw(N_OOD // scale, outside),
    )


def known_worlds(seed: int, scale: int = 1) -> list[KnownWorld]:
    return [vmf_mixture_world(seed, scale=scale), stretched_gaussian_world(seed, scale=scale)]


def known_answer_rows(seed: int, candidates, scale: int = 1) -> list[dict]:
    """Per world and model: AUROC (OOD vs held-out, low typicality = OOD) with its interval."""
    from chexretrieve.evaluation.density_metrics import bootstrap_auroc
    from chexretrieve.evaluation.density_models import fit_density_models

    rows = []
    for world in known_worlds(seed, scale):
        models = fit_density_models(world.archive, candidates, seed)
        for name, model in models.scores.items():
            value, lower, upper = bootstrap_auroc(
                -model(world.ood), -model(world.heldout), seed=seed
            )
            rows.append(
                {
                    "world": world.name,
                    "EM seed": seed,
                    "model": name,
                    "K": models.n_components if name == "movmf" else np.nan,
                    "AUROC": value,
                    "lower": lower,
                    "upper": upper,
                }
            )
    return rows


def check_winners(rows) -> list[dict]:
    """Per world and seed: the expected winner, the observed AUROCs and whether the check passed
    (the expected model beats the other of MovMF / Gaussian by ``WIN_MARGIN``)."""
    import pandas as pd

    table = pd.DataFrame(rows)
    out = []
    for (world, seed), part in table.groupby(["world", "EM seed"], sort=False):
        value = part.set_index("model")["AUROC"]
        expected = EXPECTED[world]
        other = "gaussian" if expected == "movmf" else "movmf"
        gain = float(value[expected] - value[other])
        out.append(
            {
                "world": world,
                "EM seed": int(seed),
                "expected winner": expected,
                "MovMF AUROC": float(value["movmf"]),
                "Gaussian AUROC": float(value["gaussian"]),
                "margin": gain,
                "check": "passed" if gain >= WIN_MARGIN else "FAILED",
            }
        )
    return out
