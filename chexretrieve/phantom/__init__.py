"""The phantom world: procedurally generated chest radiograph phantoms with known truth.

    from chexretrieve.phantom import generate_case, PhantomCase, PhantomConfig
    case = generate_case(seed, index, PhantomConfig(size=224))

Everything here is a SIMULATION; figures measured on phantoms say nothing about patients.
"""

from __future__ import annotations

from chexretrieve.phantom.config import PhantomConfig
from chexretrieve.phantom.generator import (
    SYNTHETIC_NOTE,
    PhantomCase,
    generate_batch,
    generate_case,
)

__all__ = ["SYNTHETIC_NOTE", "PhantomCase", "PhantomConfig", "generate_batch", "generate_case"]
