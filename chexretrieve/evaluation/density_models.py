"""The density models the evaluation compares, all fitted on the archive only.

* ``movmf``: the vMF mixture, K chosen by held-out likelihood over a range extended until the
  curve turns (:func:`chexretrieve.evaluation.density_selection.select_k`), or a given K;
* ``movmf K=1``: one vMF (the mixture's ablation);
* ``gaussian``: a Ledoit–Wolf shrinkage Gaussian (the seed's Gaussian assumption);
* ``knn``: the mean cosine to the 10 nearest archive images.

Each gives a *typicality* (higher = more like the archive). ``reference`` holds what new
in-distribution images score: the archive's held-out 20 % scored by each model fitted on the
other 80 % (the deployed OOD rule thresholds a low percentile of it, as
:func:`chexretrieve.density.archive.fit_archive_density` does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from chexretrieve.evaluation.density_selection import KSelection, select_k, split_rows
from chexretrieve.geometry.density_baselines import GaussianDensity, KnnCosineScore
from chexretrieve.geometry.movmf_density import MovMFDensity, fit_movmf_density

#: the models in report order
MODEL_NAMES = ("movmf", "movmf K=1", "gaussian", "knn")
#: neighbours of the k-NN score
KNN_K = 10


@dataclass
class DensityModels:
    scores: dict[str, Callable]  # name -> typicality of unit rows
    reference: dict[str, np.ndarray]  # name -> typicality of the archive's held-out 20 %
    movmf: MovMFDensity  # fitted on the whole archive
    train_fit: MovMFDensity  # the same K on the 80 % split (scores the held-out 20 %)
    heldout_rows: np.ndarray
    selection: KSelection | None  # None when K was given
    fit_seconds: dict[str, float]

    @property
    def n_components(self) -> int:
        return self.movmf.n_components


def fit_density_models(
    archive, candidates=(1, 2, 4, 8, 16, 32, 64), seed: int = 0, n_components: int | None = None
) -> DensityModels:
    """Fit the four models; K by :func:`select_k` unless ``n_components`` is given."""
    x = np.asarray(archive, dtype=np.float64)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    selection = None
    if n_components is None:
        selection = select_k(x, candidates, seed)
        n_components, train_fit = selection.chosen, selection.train_fit
        train, held = selection.train_rows, selection.heldout_rows
    else:
        train, held = split_rows(len(x), seed)
        train_fit = fit_movmf_density(x[train], n_components, seed=seed)
    movmf = fit_movmf_density(x, n_components, seed=seed)
    timings["movmf"] = time.perf_counter() - started
    started = time.perf_counter()
    single = fit_movmf_density(x, 1, seed=seed)
    timings["movmf K=1"] = time.perf_counter() - started
    started = time.perf_counter()
    gaussian = GaussianDensity.fit(x)
    timings["gaussian"] = time.perf_counter() - started
    knn = KnnCosineScore(x, k=KNN_K)
    part, rest = x[train], x[held]
    reference = {
        "movmf": train_fit.log_density(rest),
        "movmf K=1": fit_movmf_density(part, 1, seed=seed).log_density(rest),
        "gaussian": GaussianDensity.fit(part).log_density(rest),
        "knn": KnnCosineScore(part, k=KNN_K).score(rest),
    }
    scores = {
        "movmf": movmf.log_density,
        "movmf K=1": single.log_density,
        "gaussian": gaussian.log_density,
        "knn": knn.score,
    }
    return DensityModels(scores, reference, movmf, train_fit, held, selection, timings)
