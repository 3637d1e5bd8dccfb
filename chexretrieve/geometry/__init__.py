"""Anchor geometries: finding-specific similarity between image embeddings, defined by text anchors.

The idea in one paragraph. A CLIP-style model maps an image to a unit vector λ and a sentence to a
unit vector γ. A set of anchor sentences about one finding defines a distribution q over text
embeddings. Tilting q by an image, q_λ(γ) ∝ exp(inv_t·λᵀγ) q(γ), gives each image a distribution
over the anchors; two images are compared by the KL divergence between their tilted distributions.
That KL is the Bregman divergence of q's cumulant generating function κ_q(η) = log E_q[exp(ηᵀγ)] at
η = inv_t·λ:  d(λ1 ‖ λ2) = κ(η2) − κ(η1) − ∇κ(η1)ᵀ(η2 − η1). Choosing q chooses the geometry:

======================  =========================================================================
kind                    anchor model q, and what the divergence becomes
======================  =========================================================================
``softmax``             the empirical (optionally weighted) anchor set: KL of anchor softmaxes
``gaussian``            N(μ, Σ): (inv_t²/2)(λ1 − λ2)ᵀΣ(λ1 − λ2)
``latent_gaussian``     Gaussian on the top-k anchor subspace U: (inv_t²/2)‖Uᵀ(λ1 − λ2)‖²
``latent_spherical``    uniform on the unit sphere of U: inv_t·A_k(inv_t)·(1 − cos(Uᵀλ1, Uᵀλ2))
                        (k by the 95%-variance rule unless given; k = d would rank exactly as
                        cosine and is refused: ``CosineEquivalentGeometryError``)
``gmm``                 Gaussian mixture (EM): a non-quadratic Bregman divergence
``movmf``               von Mises–Fisher mixture on the sphere (EM): likewise
``cosine``, ``iti``     baselines, not divergences: cosine similarity; image-text inversion
======================  =========================================================================

With a ``prior`` (broad anchors) gaussian, latent_* and gmm become posterior models adapted to the
target anchors (NIW, matrix Bingham, Dirichlet–NIW updates). Every name a user may give for a
geometry (``gaussian_posterior`` = ``posterior_gaussian``), its display name and whether it needs
the broad corpus are defined once in :mod:`chexretrieve.geometry.names` (``geometry_name``).

Ranking uses the symmetrised divergence
d_sym = ½[d(q‖k) + d(k‖q)] = ½(η_q − η_k)ᵀ(∇κ(η_q) − ∇κ(η_k)). Each item therefore needs only
η and ∇κ(η), computed once (``features``), and a whole gallery is scored by one matrix product
(``score``), which is also an inner product plus per-item constants,
so maximum-inner-product indexes can serve it::

    geom = fit_geometry("softmax", anchors, inv_temperature=100.0)
    keys = geom.features(gallery)          # cache these; they are the index's key vectors
    fq = geom.features(queries)
    s = geom.query_vectors(fq) @ keys.T + geom.query_offsets(fq)[:, None]  # geom.score(fq, keys)

This package imports only numpy, scipy and scikit-learn and does no I/O.
"""

from chexretrieve.geometry.base import AnchorGeometry
from chexretrieve.geometry.checks import UNIT_NORM_TOLERANCE, CosineEquivalentGeometryError
from chexretrieve.geometry.factory import fit_geometry, geometry_options
from chexretrieve.geometry.names import (
    DIVERGENCE_KINDS,
    GEOMETRIES,
    GEOMETRY_CHOICES,
    GEOMETRY_KINDS,
    POSTERIOR_KINDS,
    GeometryName,
    geometry_name,
)
from chexretrieve.geometry.softmax import mix_anchor_sets

__all__ = [
    "DIVERGENCE_KINDS",
    "GEOMETRIES",
    "GEOMETRY_CHOICES",
    "GEOMETRY_KINDS",
    "POSTERIOR_KINDS",
    "UNIT_NORM_TOLERANCE",
    "AnchorGeometry",
    "CosineEquivalentGeometryError",
    "GeometryName",
    "fit_geometry",
    "geometry_name",
    "geometry_options",
    "mix_anchor_sets",
]
