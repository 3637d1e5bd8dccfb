"""Settings of the archive density (out-of-distribution flag, rarity, concept decomposition)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: ``background_fit_above`` for one-shot commands: always fit during the call
FIT_NOW = 2**62
#: scores the OOD flag may use (chexretrieve.density.archive)
OOD_MODELS = ("movmf", "gaussian")
#: how the mixture's component count is chosen (chexretrieve.geometry.movmf_density)
DENSITY_CRITERIA = ("heldout", "bic")


@dataclass(frozen=True)
class DensityConfig:
    # attach the archive density (log-density, percentile, OOD flag) to every search
    enabled: bool = True
    # component counts tried for the archive's vMF mixture (those above the archive size skipped)
    candidates: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    # how the count is chosen: "heldout" (mean log-likelihood of a 20 % split) or "bic"
    criterion: str = "heldout"
    # seed of the EM fits and of the held-out split (a fit is a pure function of archive + seed)
    seed: int = 0
    # a query whose log-density is below this percentile of the archive's held-out reference is
    # flagged OOD (by construction about this share of new in-distribution queries; measured
    # spread over seeds and worlds in eval/reports/density-phantom)
    ood_percentile: float = 0.5
    # the score of the OOD flag and percentile: "gaussian" (a Ledoit–Wolf Gaussian: ahead of the
    # vMF mixture on near shifts, display errors and far images in every run of the phantom
    # evaluation, eval/reports/density-phantom) or "movmf" (the mixture); rarity and the archive
    # cluster always use the mixture
    ood_model: str = "gaussian"
    # refit when more than this fraction of the fitted images were added or removed since
    refit_fraction: float = 0.1
    # fit (or refit) during a search when there is no usable fit; False = report "no density"
    fit_on_search: bool = True
    # folder of the fitted densities; None = density/ under the cache root (chexretrieve.cache)
    cache_dir: Path | None = None
    # fewest archive images a density is fitted on (fewer: searches carry no density)
    min_images: int = 20
    # larger archives are fitted on a seeded random sample of this many images (every image is
    # still scored); bounds the fit's time (docs/density.md has the measured cost)
    fit_sample: int = 20_000
    # a search that must fit an archive larger than this starts the fit in the background and
    # carries "no density yet" until it is ready (smaller archives are fitted during the search;
    # refits always run in the background, the old fit flagged stale meanwhile; FIT_NOW: every
    # fit and refit during the call, for one-shot commands)
    background_fit_above: int = 5000
    # concept decomposition: list the top components covering this share of the posterior
    concept_mass: float = 0.9

    def __post_init__(self) -> None:
        if self.criterion not in DENSITY_CRITERIA:
            raise ValueError(
                f"unknown density criterion {self.criterion!r}; choose one of: "
                f"{', '.join(DENSITY_CRITERIA)}"
            )
        if self.ood_model not in OOD_MODELS:
            raise ValueError(
                f"unknown OOD model {self.ood_model!r}; choose one of: {', '.join(OOD_MODELS)}"
            )
        if not 0 < self.ood_percentile < 50:
            raise ValueError(f"ood_percentile must be in (0, 50), got {self.ood_percentile}")
        if not 0 <= self.refit_fraction <= 1:
            raise ValueError(f"refit_fraction must be in [0, 1], got {self.refit_fraction}")
        if not self.candidates or min(self.candidates) < 1:
            raise ValueError(f"candidates must be positive counts, got {self.candidates}")
        if self.min_images < 3:
            raise ValueError(f"min_images must be at least 3, got {self.min_images}")
        if self.fit_sample < self.min_images:
            raise ValueError(
                f"fit_sample ({self.fit_sample}) must be at least min_images ({self.min_images})"
            )
        if not 0 < self.concept_mass <= 1:
            raise ValueError(f"concept_mass must be in (0, 1], got {self.concept_mass}")
