"""Bad input is refused with a ValueError that names the problem and the fix."""

from __future__ import annotations

import numpy as np
import pytest
from geometry_reference import unit_rows

from chexretrieve.geometry import fit_geometry, mix_anchor_sets

RNG = np.random.default_rng(60)
ANCHORS = unit_rows(RNG, 20, 8)
IMAGES = unit_rows(RNG, 3, 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "hyperbolic"}, r"unknown geometry kind 'hyperbolic'; valid kinds: cosine, iti"),
        ({"kind": "softmax", "inv_temperature": 0.0}, r"inv_temperature must be finite and > 0"),
        ({"kind": "softmax", "inv_temperature": np.nan}, r"inv_temperature must be finite"),
        ({"kind": "softmax", "inv_temperature": "hot"}, r"inv_temperature must be a positive"),
        ({"kind": "softmax", "anchors": ANCHORS[0]}, r"must be a 2-D array \(n, d\)"),
        ({"kind": "softmax", "anchors": ANCHORS[:0]}, r"anchors is empty"),
        ({"kind": "softmax", "anchors": 2 * ANCHORS}, r"anchors row 0 has L2 norm 2, not 1"),
        ({"kind": "softmax", "anchors": None}, r"geometry 'softmax' needs anchors"),
        ({"kind": "softmax", "anchors": ANCHORS[:1]}, r"at least two distinct anchors"),
        ({"kind": "softmax", "weights": np.ones(3)}, r"weights has shape \(3,\) but there are 20"),
        ({"kind": "softmax", "weights": -np.ones(20)}, r"weights must be finite and >= 0"),
        ({"kind": "softmax", "weights": np.zeros(20)}, r"weights sum to 0"),
        ({"kind": "softmax", "n_components": 3}, r"unknown option\(s\) n_components for geometry"),
        ({"kind": "softmax", "prior": ANCHORS}, r"'softmax' has no posterior version"),
        ({"kind": "gaussian", "kappa0": 2.0}, r"only apply to posterior models; pass prior="),
        ({"kind": "gaussian", "anchors": ANCHORS[:1]}, r"needs at least 2 distinct anchors"),
        ({"kind": "gmm", "n_components": 21}, r"n_components=21 exceeds the number of distinct"),
        ({"kind": "gmm", "n_components": 0}, r"n_components must be an integer >= 1"),
        ({"kind": "movmf", "n_components": 30}, r"n_components=30 exceeds the number of distinct"),
        ({"kind": "latent_spherical", "k": 20}, r"k=20 exceeds the rank 8 of the anchor cov"),
        ({"kind": "latent_gaussian", "k": 2.5}, r"k must be an integer >= 1"),
        ({"kind": "latent_gaussian", "explained_variance": 1.5}, r"explained_variance is a"),
        ({"kind": "gaussian", "prior": unit_rows(RNG, 9, 5)}, r"prior anchors have dimension 5"),
        ({"kind": "gaussian", "prior": ANCHORS, "nu0": 5.0}, r"nu0 must exceed d \+ 1 = 9"),
        ({"kind": "gmm", "prior": ANCHORS, "target_weight": -1}, r"target_weight must be finite"),
    ],
)
def test_bad_fit_arguments_are_refused(kwargs, message):
    kwargs = {"anchors": ANCHORS, **kwargs}
    with pytest.raises(ValueError, match=message):
        fit_geometry(**kwargs)


def test_non_finite_anchor_is_named():
    anchors = ANCHORS.copy()
    anchors[4, 2] = np.inf
    with pytest.raises(ValueError, match=r"anchors row 4 contains NaN or infinite values"):
        fit_geometry("softmax", anchors)


def test_text_array_is_refused():
    with pytest.raises(ValueError, match=r"must be a numeric array"):
        fit_geometry("softmax", np.array([["a", "b"]]))


def test_unit_norm_tolerance_is_relative_1e_3():
    nearly = ANCHORS * (1 + 5e-4)
    fit_geometry("softmax", nearly)
    with pytest.raises(ValueError, match=r"tolerance 0.001"):
        fit_geometry("softmax", ANCHORS * (1 + 2e-3))


@pytest.mark.parametrize("kind", ["softmax", "gaussian", "gmm", "movmf", "iti"])
def test_images_of_the_wrong_dimension_or_norm_are_refused(kind):
    geom = fit_geometry(kind, ANCHORS, n_components=2) if kind in ("gmm", "movmf") else None
    geom = geom or fit_geometry(kind, ANCHORS)
    with pytest.raises(ValueError, match=r"images have dimension 5 but the anchors are 8-d"):
        geom.features(unit_rows(RNG, 2, 5))
    with pytest.raises(ValueError, match=r"images row 1 has L2 norm 0"):
        geom.features(np.vstack([IMAGES[:1], np.zeros((1, 8))]))
    bad = IMAGES.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"images row 2 contains NaN"):
        geom.similarity(IMAGES, bad)


def test_features_of_another_geometry_are_refused():
    softmax = fit_geometry("softmax", ANCHORS)
    with pytest.raises(ValueError, match=r"this geometry's features have 17 columns"):
        softmax.score(IMAGES, softmax.features(IMAGES))


def test_mixing_weight_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"mixing weight p must lie in \[0, 1\], got 1.5"):
        mix_anchor_sets(ANCHORS[:5], ANCHORS[5:], 1.5)
    with pytest.raises(ValueError, match=r"anchors_b have dimension 3"):
        mix_anchor_sets(ANCHORS[:5], unit_rows(RNG, 4, 3), 0.5)
