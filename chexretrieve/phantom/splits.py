"""Which cases of a phantom world are in which split, and a fingerprint of the generator.

Shared by the encoder's training (``training.py``, draws the training split) and its evaluation
(``zero_shot.py``, scores the validation split), so neither imports the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from chexretrieve.phantom.config import PhantomConfig


def split_indices(seed: int, split: str, count: int, config: PhantomConfig) -> list[int]:
    """The first ``count`` case indices of the world ``seed`` whose patient is in ``split``."""
    from chexretrieve.phantom.sampling import patient_of

    if split not in ("train", "valid"):
        raise ValueError(f"unknown split {split!r}; use 'train' or 'valid'")
    if count < 1:
        raise ValueError(f"the number of cases must be at least 1, got {count!r}")
    if split == "valid" and config.valid_fraction <= 0:
        raise ValueError("PhantomConfig.valid_fraction is 0, so the world has no validation split")
    found: list[int] = []
    index = 0
    while len(found) < count:
        if patient_of(seed, index, config).split == split:
            found.append(index)
        index += 1
    return found


def generator_fingerprint(cases: Sequence[Any], count: int = 8) -> str:
    """Short sha256 of the first cases' pixels and reports: it changes when the generator does."""
    digest = hashlib.sha256()
    for case in cases[:count]:
        digest.update(np.ascontiguousarray(case.image, dtype=np.float32).tobytes())
        digest.update(case.report.encode("utf-8"))
    return digest.hexdigest()[:16]
