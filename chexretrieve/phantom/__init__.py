"""The phantom world: procedurally generated chest radiograph phantoms with known truth.

    from chexretrieve.phantom import generate_case, PhantomCase, PhantomConfig
    case = generate_case(seed, index, PhantomConfig(size=224))
    case.image, case.labels, case.truth, case.report, case.sentences, case.nuisance, case.metadata
    describe_case(seed, index)   # the same without drawing the image (labels, report, metadata)

Everything here is a SIMULATION; figures measured on phantoms say nothing about patients.
The names are loaded lazily so that importing the command group keeps `chexretrieve --help` fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = [
    "SYNTHETIC_NOTE",
    "PhantomCase",
    "PhantomConfig",
    "describe_case",
    "generate_batch",
    "generate_case",
]

if TYPE_CHECKING:  # pragma: no cover
    from chexretrieve.phantom.config import PhantomConfig
    from chexretrieve.phantom.generator import (
        SYNTHETIC_NOTE,
        PhantomCase,
        describe_case,
        generate_batch,
        generate_case,
    )


def __getattr__(name: str):
    if name == "PhantomConfig":
        from chexretrieve.phantom.config import PhantomConfig

        return PhantomConfig
    if name in __all__:
        from chexretrieve.phantom import generator

        return getattr(generator, name)
    raise AttributeError(f"module 'chexretrieve.phantom' has no attribute {name!r}")
