"""Geometry specs of the evaluation ("softmax", "gmm:n_components=4", "posterior_gmm") and fitting.

A spec names a geometry of ``chexretrieve.geometry`` plus keyword options; the prefix ``posterior_``
fits the same kind with the broad anchor corpus as prior. ``cosine`` ignores the anchors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chexretrieve.geometry import GEOMETRIES, GEOMETRY_KINDS, geometry_name

KINDS = GEOMETRY_KINDS
#: mixture kinds and their default number of components (chexretrieve.geometry's default)
MIXTURE_KINDS = ("gmm", "movmf")
DEFAULT_COMPONENTS = 4

#: human-readable names used in tables and figure legends (chexretrieve.geometry.names), by the
#: evaluation's spelling
DISPLAY_NAMES = {g.prefixed: g.display for g in GEOMETRIES}

#: fit(kind, anchors, inv_temperature, prior, **options) -> fitted geometry
Fitter = Callable[..., Any]


@dataclass(frozen=True)
class GeometrySpec:
    name: str  # the spec's label in tables ("gmm" or "gmm:n_components=4")
    kind: str  # chexretrieve.geometry kind
    posterior: bool  # fit with the broad corpus as prior
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_anchors(self) -> bool:
        return self.kind != "cosine"

    @property
    def display(self) -> str:
        base = DISPLAY_NAMES.get(self.name.split(":")[0], self.name)
        return base if ":" not in self.name else f"{base} ({self.name.split(':', 1)[1]})"


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_geometry(spec: str) -> GeometrySpec:
    """'gmm:n_components=4' -> GeometrySpec(kind='gmm', options={'n_components': 4})."""
    head, sep, tail = spec.strip().partition(":")
    named = geometry_name(head)  # either spelling; ValueError listing the names
    head = named.prefixed  # tables and reports use the evaluation's spelling
    spec = head + sep + tail
    posterior, kind = named.posterior, named.kind
    options: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in tail.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"geometry option {item!r} in {spec!r} must look like key=value")
        options[key.strip()] = _parse_value(value.strip())
    return GeometrySpec(name=spec.strip(), kind=kind, posterior=posterior, options=options)


def default_fitter() -> Fitter:
    """``chexretrieve.geometry.fit_geometry`` (imported on first use)."""
    from chexretrieve.geometry import fit_geometry

    return fit_geometry


def fit_spec(
    spec: GeometrySpec,
    anchors: np.ndarray,
    inv_temperature: float,
    *,
    prior: np.ndarray | None = None,
    fitter: Fitter | None = None,
    **extra: Any,
) -> Any:
    """Fit one geometry; posterior specs need ``prior`` (the broad anchor embeddings)."""
    fit = fitter or default_fitter()
    if spec.posterior and prior is None:
        raise ValueError(
            f"geometry {spec.name!r} needs a broad anchor corpus as prior; none was found "
            "(add anchors/broad/... or drop the posterior geometries)"
        )
    options = {**spec.options, **extra}
    if spec.kind in MIXTURE_KINDS and not spec.posterior:
        # a mixture cannot have more components than distinct anchors (tiny anchor budgets)
        distinct = len(np.unique(np.asarray(anchors), axis=0))
        if distinct < options.get("n_components", DEFAULT_COMPONENTS):
            options["n_components"] = max(distinct, 1)
    return fit(
        spec.kind,
        np.asarray(anchors, dtype=np.float32),
        inv_temperature=inv_temperature,
        prior=prior if spec.posterior else None,
        **options,
    )
