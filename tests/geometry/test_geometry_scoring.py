"""Every kind: features → score as one matrix product, MIPS vectors, baselines, dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from geometry_reference import clustered_unit_rows, unit_rows

from chexretrieve.geometry import (
    DIVERGENCE_KINDS,
    GEOMETRY_KINDS,
    POSTERIOR_KINDS,
    fit_geometry,
    geometry_options,
)

DIM = 512


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(50)
    return {
        "anchors": clustered_unit_rows(rng, 50, DIM, 4, 0.05),
        "prior": clustered_unit_rows(rng, 300, DIM, 8, 0.05),
        "queries": unit_rows(rng, 6, DIM),
        "keys": unit_rows(rng, 40, DIM),
    }


@pytest.fixture(scope="module")
def geometries(data):
    """Every kind fitted once, plus the posterior versions (name -> geometry)."""
    fitted = {}
    for kind in GEOMETRY_KINDS:
        fitted[kind] = fit_geometry(kind, data["anchors"], inv_temperature=100.0)
        if kind in POSTERIOR_KINDS:
            fitted[f"posterior_{kind}"] = fit_geometry(
                kind, data["anchors"], inv_temperature=100.0, prior=data["prior"]
            )
    return fitted


def test_kinds_are_the_documented_ones():
    assert GEOMETRY_KINDS == (
        "cosine",
        "iti",
        "softmax",
        "gaussian",
        "latent_gaussian",
        "latent_spherical",
        "gmm",
        "movmf",
    )
    assert set(DIVERGENCE_KINDS) == set(GEOMETRY_KINDS) - {"cosine", "iti"}
    assert geometry_options("softmax") == {"weights": None, "anchor_chunk": 2048}
    assert geometry_options("gmm")["reg_covar"] == 1e-5


def test_score_is_an_inner_product_plus_constants_and_matches_the_divergence(data, geometries):
    q, k = data["queries"], data["keys"]
    for name, geom in geometries.items():
        fq, fk = geom.features(q), geom.features(k)
        assert fq.shape == (len(q), geom.feature_dim), name
        assert geom.query_vectors(fq).shape == fq.shape, name
        np.testing.assert_array_equal(geom.key_vectors(fk), fk)
        mips = geom.query_vectors(fq) @ fk.T + geom.query_offsets(fq)[:, None]
        score = geom.score(fq, fk)
        np.testing.assert_allclose(mips, score, rtol=0, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(geom.similarity(q, k), score, rtol=0, atol=1e-9, err_msg=name)
        if geom.is_divergence:
            d_qk, d_kq = geom.divergence(q, k), geom.divergence(k, q)
            assert d_qk.min() >= -1e-9, name
            assert np.abs(score + 0.5 * (d_qk + d_kq.T)).max() <= 1e-8, name
            self_div = geom.divergence(q, q)
            assert np.abs(np.diag(self_div)).max() <= 1e-9, name
            # MIPS ranking: a query's best key is its own copy
            own = geom.score(fq, np.vstack([fk, fq]))
            assert (np.argmax(own, axis=1) == len(k) + np.arange(len(q))).all(), name


def test_feature_widths(geometries):
    widths = {name: geom.feature_dim for name, geom in geometries.items()}
    assert widths["cosine"] == widths["iti"] == DIM
    assert widths["softmax"] == 2 * 49 + 1
    assert widths["gaussian"] == 49 + 1
    # plain GMM: covariances share the 1e-5 floor, gradients live in f·η + the anchors' span
    assert widths["gmm"] == DIM + 2 * 49 + 1
    assert widths["movmf"] == widths["posterior_gmm"] == 2 * DIM + 1
    # the posterior latent k by the 95%-variance rule: below d, so not cosine in disguise
    assert 1 < widths["posterior_latent_gaussian"] - 1 < DIM
    assert widths["posterior_latent_gaussian"] == geometries["posterior_latent_gaussian"].k + 1


def test_cosine_and_iti_scores(data):
    q, k, anchors = data["queries"], data["keys"], data["anchors"]
    cosine = fit_geometry("cosine", None)
    np.testing.assert_allclose(cosine.similarity(q, k), q @ k.T, atol=1e-12)
    assert cosine.dim == DIM
    iti = fit_geometry("iti", anchors)
    nearest = np.array([np.argmax([row @ a for a in anchors]) for row in q])
    np.testing.assert_allclose(iti.similarity(q, k), anchors[nearest] @ k.T, atol=1e-12)
    np.testing.assert_array_equal(iti.nearest_anchor(iti.features(q)), nearest)
    with pytest.raises(ValueError, match="baseline score, not a divergence"):
        iti.divergence(q, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_and_in_the_gallery_dtype_at_inverse_temperature_100(data, geometries, dtype):
    q, k = data["queries"].astype(dtype), data["keys"].astype(dtype)
    for name, geom in geometries.items():
        fk = geom.features(k)
        assert fk.dtype == dtype, name
        score = geom.score(geom.features(q), fk)
        assert np.isfinite(score).all(), name
        exact = geom.similarity(data["queries"], data["keys"])
        assert np.abs(score - exact).max() <= 1e-4 * max(1.0, np.abs(exact).max()), name


def test_empty_gallery_gives_empty_features(data):
    geom = fit_geometry("softmax", data["anchors"])
    assert geom.features(np.zeros((0, DIM))).shape == (0, geom.feature_dim)


def test_public_attributes(data):
    geom = fit_geometry("softmax", data["anchors"], inv_temperature=42.0)
    assert (geom.kind, geom.dim, geom.inv_temperature) == ("softmax", DIM, 42.0)
    np.testing.assert_array_equal(geom.anchors, data["anchors"])
    assert "softmax" in repr(geom)
