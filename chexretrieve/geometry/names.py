"""Geometry names: every name a user may give, defined once (pure data, no fitting here).

A geometry is a ``kind`` of :func:`~chexretrieve.geometry.fit_geometry` and whether it is the
*posterior* version, adapted from the broad clinical corpus (which it then needs as prior). Names:

- ``softmax``, ``gaussian``, ...: the kind itself;
- ``gaussian_posterior`` (the search and UI spelling, :attr:`GeometryName.name`) and
  ``posterior_gaussian`` (the evaluation's spelling, :attr:`GeometryName.prefixed`) are the same
  geometry; case, spaces and hyphens are ignored (``Gaussian-Posterior``).

Search, the UI, the evaluation and anchor curation all read names through :func:`geometry_name`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: human-readable names of the kinds (tables, figure legends, the UI)
KIND_DISPLAY: dict[str, str] = {
    "cosine": "Cosine",
    "iti": "ITI",
    "softmax": "Softmax",
    "gaussian": "Gaussian",
    "latent_gaussian": "Latent Gaussian",
    "latent_spherical": "Latent spherical",
    "gmm": "GMM",
    "movmf": "MovMF",
}
#: human-readable names of the posterior versions
POSTERIOR_DISPLAY: dict[str, str] = {
    "gaussian": "Posterior Gaussian",
    "latent_gaussian": "Posterior latent Gaussian",
    "latent_spherical": "Posterior latent spherical",
    "gmm": "Posterior GMM",
}
#: every kind ``fit_geometry`` accepts
GEOMETRY_KINDS: tuple[str, ...] = tuple(KIND_DISPLAY)
#: kinds with a posterior version (they accept a broad ``prior`` anchor set)
POSTERIOR_KINDS: tuple[str, ...] = tuple(POSTERIOR_DISPLAY)
#: kinds whose ``divergence`` is defined (cosine and ITI are baselines, not divergences)
DIVERGENCE_KINDS: tuple[str, ...] = tuple(k for k in GEOMETRY_KINDS if k not in ("cosine", "iti"))


@dataclass(frozen=True)
class GeometryName:
    # geometry kind passed to fit_geometry
    kind: str
    # the posterior version, adapted from the broad clinical corpus (needed as its prior)
    posterior: bool = False

    @property
    def name(self) -> str:
        """The search / UI spelling: ``gaussian`` or ``gaussian_posterior``."""
        return f"{self.kind}_posterior" if self.posterior else self.kind

    @property
    def prefixed(self) -> str:
        """The evaluation's spelling: ``gaussian`` or ``posterior_gaussian``."""
        return f"posterior_{self.kind}" if self.posterior else self.kind

    @property
    def display(self) -> str:
        """Shown in tables, figure legends and the UI: ``Posterior Gaussian``."""
        return POSTERIOR_DISPLAY[self.kind] if self.posterior else KIND_DISPLAY[self.kind]

    @property
    def needs_broad_corpus(self) -> bool:
        """Whether fitting needs the broad clinical corpus (anchors/broad/...) as prior."""
        return self.posterior

    @property
    def needs_anchors(self) -> bool:
        """Whether fitting needs the finding's anchors (cosine ignores them)."""
        return self.kind != "cosine"


#: every geometry, target-only kinds first, then the posterior versions
GEOMETRIES: tuple[GeometryName, ...] = tuple(GeometryName(k) for k in GEOMETRY_KINDS) + tuple(
    GeometryName(k, posterior=True) for k in POSTERIOR_KINDS
)
#: every geometry in the search / UI spelling
GEOMETRY_CHOICES: tuple[str, ...] = tuple(g.name for g in GEOMETRIES)

_BY_SPELLING: dict[str, GeometryName] = {
    spelling: g for g in GEOMETRIES for spelling in (g.name, g.prefixed)
}


def geometry_name(name: str) -> GeometryName:
    """The geometry ``name`` means, in either spelling; ValueError listing the valid names."""
    key = "_".join(str(name).strip().lower().replace("-", " ").split())
    found = _BY_SPELLING.get(key)
    if found is None:
        raise ValueError(
            f"unknown geometry {name!r}; choose one of: {', '.join(GEOMETRY_CHOICES)} "
            "(posterior_<kind> means the same as <kind>_posterior)"
        )
    return found
