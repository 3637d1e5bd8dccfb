"""Settings of the phantom world: the image generator and the DICOM archive writer."""

from __future__ import annotations

from dataclasses import dataclass

#: the smallest and largest image side `generate_case` accepts, in pixels
MIN_SIZE = 64
MAX_SIZE = 2048


@dataclass(frozen=True)
class PhantomConfig:
    """How phantom cases are drawn; every field changes the images or reports deterministically."""

    # side length of the square output image in pixels (64-2048)
    size: int = 320
    # multiplies every finding's base prevalence (1 = the designed rates; 0 = only normal cases)
    prevalence: float = 1.0
    # chance that a present finding is reported with hedging ("possible ...", CheXpert label -1)
    uncertain_rate: float = 0.12
    # chance that an absent finding is explicitly negated in the report (label 0); else left blank
    negative_mention_rate: float = 0.35
    # fraction of studies taken AP (portable) instead of PA
    ap_fraction: float = 0.35
    # fraction of patients assigned to the validation split
    valid_fraction: float = 0.12
    # 0 = canonical pose, exposure and no noise; 1 = the designed nuisance ranges
    nuisance_scale: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or not MIN_SIZE <= self.size <= MAX_SIZE:
            raise ValueError(
                f"phantom image size {self.size!r} is out of range: use an integer between "
                f"{MIN_SIZE} and {MAX_SIZE} pixels"
            )
        for name in ("uncertain_rate", "negative_mention_rate", "ap_fraction", "valid_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PhantomConfig.{name} must lie in [0, 1], got {value!r}")
        if not 0.0 <= self.prevalence <= 3.0:
            raise ValueError(
                f"PhantomConfig.prevalence must lie in [0, 3], got {self.prevalence!r}"
            )
        if not 0.0 <= self.nuisance_scale <= 2.0:
            raise ValueError(
                f"PhantomConfig.nuisance_scale must lie in [0, 2], got {self.nuisance_scale!r}"
            )


@dataclass(frozen=True)
class ArchiveConfig:
    """What `chexretrieve phantom make` writes."""

    # number of images to generate (> 0)
    n: int = 3000
    # seed of the phantom world; the same seed gives byte-identical pixels and CSVs
    seed: int = 0
    # overwrite a non-empty output folder instead of refusing
    force: bool = False
    # worker processes that generate and write images (1 = in-process)
    workers: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n <= 0:
            raise ValueError(f"the number of images must be a positive integer, got {self.n!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"the seed must be a non-negative integer, got {self.seed!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers!r}")
