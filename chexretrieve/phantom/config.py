"""Settings of the phantom world: the image generator and the DICOM archive writer."""

from __future__ import annotations

from dataclasses import dataclass

#: the smallest and largest image side `generate_case` accepts, in pixels
MIN_SIZE = 64
MAX_SIZE = 2048


#: version of what the generator draws for a given (seed, index, config): bumped whenever those
#: pixels change, so caches of phantom embeddings (chexretrieve.evaluation.phantom_source) are not
#: reused across it. 2: the L/R marker sits on the side it names (issue 24).
RENDER_VERSION = 2


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


@dataclass(frozen=True)
class PhantomTrainingConfig:
    """How `chexretrieve phantom train` trains the phantom encoder (defaults: the bundled one)."""

    # seed of the phantom world drawn from and of the weight initialisation and batch order; the
    # default 1 keeps the training world disjoint from the evaluation world (seed 0)
    seed: int = 1
    # training-split phantom cases drawn (the validation split's patients are never used)
    n_images: int = 6000
    # optimiser steps (phantom-v3 and v4: 2,800; v2 had 1,400, too few for image-to-image
    # retrieval to beat the query-independent prompt direction)
    steps: int = 2800
    # images per step (and texts: one per image)
    batch_size: int = 128
    # side of the square CNN input in pixels (a multiple of 4)
    image_size: int = 128
    # side of the generated phantoms, shrunk to image_size exactly as the encoder shrinks its input
    render_size: int = 256
    # multiplies the phantom world's finding prevalence for training (more examples of rare signs)
    prevalence: float = 2.0
    # channels of the patch stem, then of each residual stage (each stage halves the resolution)
    widths: tuple[int, ...] = (32, 64, 128, 256)
    # residual blocks per stage
    depth: int = 1
    # length of the joint image-text embedding
    embed_dim: int = 128
    # peak AdamW learning rate (linear warm-up, then cosine decay)
    learning_rate: float = 2e-3
    # AdamW weight decay on convolution and linear weights
    weight_decay: float = 0.05
    # fraction of the steps spent warming the learning rate up
    warmup_fraction: float = 0.05
    # chance an image is paired with its whole report rather than one of its sentences
    report_probability: float = 0.5
    # weight of a finding-prompt loss against the generator's truth added to the CLIP loss; 0 (the
    # default) trains on report text alone, as CheXzero was; > 0 only for experiments
    prompt_loss_weight: float = 0.0
    # random shifts, zooms, rotations and grey-level jitter of the training images
    augment: bool = True
    # torch CPU threads during training
    threads: int = 2
    # where training runs: "auto" (CUDA when available, else CPU), "cpu", "cuda" or "cuda:N"
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("n_images", "steps", "batch_size", "embed_dim", "depth", "threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"PhantomTrainingConfig.{name} must be a positive integer, got {value!r}"
                )
        if self.seed < 0:
            raise ValueError(f"the training seed must be a non-negative integer, got {self.seed!r}")
        if self.batch_size < 2:
            raise ValueError(
                "PhantomTrainingConfig.batch_size must be at least 2 for a contrastive loss"
            )
        if self.image_size < 32 or self.image_size % 4:
            raise ValueError(
                f"PhantomTrainingConfig.image_size must be a multiple of 4 and at least 32, "
                f"got {self.image_size!r}"
            )
        if len(self.widths) < 2 or min(self.widths) < 1:
            raise ValueError(
                "PhantomTrainingConfig.widths needs a stem width and at least one stage"
            )
        if not 0.0 <= self.report_probability <= 1.0:
            raise ValueError(
                "PhantomTrainingConfig.report_probability must lie in [0, 1], "
                f"got {self.report_probability!r}"
            )
        if self.learning_rate <= 0 or self.weight_decay < 0 or self.prompt_loss_weight < 0:
            raise ValueError(
                "learning_rate must be positive; weight_decay and prompt_loss_weight >= 0"
            )
        # the generator's own checks of the rendering size and the prevalence
        PhantomConfig(size=self.render_size, prevalence=self.prevalence)
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must lie in [0, 1), got {self.warmup_fraction!r}")
