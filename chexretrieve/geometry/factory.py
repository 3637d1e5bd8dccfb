"""``fit_geometry``: one entry point that checks the input and builds any geometry by name."""

from __future__ import annotations

import inspect

from chexretrieve.geometry.base import AnchorGeometry
from chexretrieve.geometry.baselines import CosineGeometry, ImageTextInversionGeometry
from chexretrieve.geometry.checks import check_inv_temperature, check_unit_rows
from chexretrieve.geometry.gaussian import (
    GaussianGeometry,
    LatentGaussianGeometry,
    LatentSphericalGeometry,
)
from chexretrieve.geometry.mixtures import GaussianMixtureGeometry, VonMisesFisherMixtureGeometry
from chexretrieve.geometry.names import GEOMETRY_KINDS, POSTERIOR_KINDS
from chexretrieve.geometry.softmax import SoftmaxGeometry

#: the class of each kind of chexretrieve.geometry.names.GEOMETRY_KINDS (same order)
_CLASSES: dict[str, type[AnchorGeometry]] = {
    "cosine": CosineGeometry,
    "iti": ImageTextInversionGeometry,
    "softmax": SoftmaxGeometry,
    "gaussian": GaussianGeometry,
    "latent_gaussian": LatentGaussianGeometry,
    "latent_spherical": LatentSphericalGeometry,
    "gmm": GaussianMixtureGeometry,
    "movmf": VonMisesFisherMixtureGeometry,
}


_NOT_OPTIONS = {"self", "anchors", "inv_temperature", "prior", "dim"}
_PRIOR_ONLY = {"kappa0", "nu0", "target_weight", "alpha", "epsilon", "beta", "dirichlet_alpha"}


def geometry_options(kind: str) -> dict[str, object]:
    """The keyword options ``fit_geometry`` accepts for ``kind``, with their defaults."""
    parameters = inspect.signature(_class_for(kind).__init__).parameters
    return {
        name: parameter.default
        for name, parameter in parameters.items()
        if name not in _NOT_OPTIONS and parameter.default is not inspect.Parameter.empty
    }


def _class_for(kind) -> type[AnchorGeometry]:
    if kind not in _CLASSES:
        raise ValueError(
            f"unknown geometry kind {kind!r}; valid kinds: {', '.join(GEOMETRY_KINDS)}"
        )
    return _CLASSES[kind]


def fit_geometry(
    kind: str,
    anchors,
    inv_temperature: float = 100.0,
    prior=None,
    **options,
) -> AnchorGeometry:
    """Fit the geometry ``kind`` to unit-norm text ``anchors`` (N, d).

    ``inv_temperature`` is the model's exp(logit_scale). ``prior`` (M, d) broad anchors turn the
    gaussian, latent_* and gmm kinds into their posterior (adapted) versions with ``anchors`` as
    the target set. ``options`` are the keyword arguments of the kind's class; unknown ones raise
    (``geometry_options(kind)`` lists them). "cosine" ignores the anchors, which may be None.
    """
    cls = _class_for(kind)
    inv_temperature = check_inv_temperature(inv_temperature)
    allowed = geometry_options(kind)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for geometry {kind!r}; valid options: "
            f"{', '.join(allowed) or 'none'}"
        )
    if prior is not None and kind not in POSTERIOR_KINDS:
        raise ValueError(
            f"geometry {kind!r} has no posterior version; prior anchors work with "
            f"{', '.join(POSTERIOR_KINDS)}"
        )
    if prior is None and set(options) & _PRIOR_ONLY:
        raise ValueError(
            f"option(s) {', '.join(sorted(set(options) & _PRIOR_ONLY))} only apply to posterior "
            "models; pass prior= (the broad anchors) or drop them"
        )
    if kind == "cosine":
        dim = None if anchors is None else check_unit_rows(anchors, "anchors").shape[1]
        return CosineGeometry(dim, inv_temperature)
    if anchors is None:
        raise ValueError(
            f"geometry {kind!r} needs anchors: an (N, d) array of unit text embeddings"
        )
    anchors = check_unit_rows(anchors, "anchors")
    if prior is not None:
        prior = check_unit_rows(prior, "prior anchors", anchors.shape[1])
        return cls(anchors, inv_temperature, prior=prior, **options)
    return cls(anchors, inv_temperature, **options)
