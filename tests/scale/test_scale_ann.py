"""FAISS indexes over geometry features: the exact index ranks like the matmul, the approximate
ones (HNSW, IVF) reach recall@10 >= 0.95 against it on queries they were not built from."""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.ann import AnnConfig, build_index, exact_top_k, recall_at_k
from chexretrieve.ann.index import augmented_keys
from chexretrieve.geometry import fit_geometry

DIM = 48
GALLERY = 4000
QUERIES = 150


def clustered_unit_rows(rng, centres, n, spread):
    """Unit vectors scattered around a few directions, like image embeddings of one archive."""
    picked = centres[rng.integers(0, len(centres), n)]
    rows = picked + spread * rng.standard_normal((n, centres.shape[1])) / np.sqrt(DIM)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((12, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return {
        "anchors": clustered_unit_rows(rng, centres, 30, 0.8),
        "gallery": clustered_unit_rows(rng, centres, GALLERY, 0.7),
        "queries": clustered_unit_rows(rng, centres, QUERIES, 0.7),
    }


_GEOMETRIES: dict[str, object] = {}


def geometry_of(kind, world):
    if kind not in _GEOMETRIES:
        options = {"seed": 0} if kind in ("gmm", "movmf") else {}
        geometry = fit_geometry(kind, world["anchors"], inv_temperature=30.0, **options)
        _GEOMETRIES[kind] = (
            geometry,
            geometry.features(world["gallery"]),
            geometry.features(world["queries"]),
        )
    return _GEOMETRIES[kind]


@pytest.mark.parametrize(
    "kind", ["softmax", "gaussian", "latent_gaussian", "latent_spherical", "gmm", "movmf", "cosine"]
)
def test_exact_index_ranks_like_the_geometry_score(kind, world):
    geometry, keys, fq = geometry_of(kind, world)
    index = build_index(geometry, keys, "exact")
    scores, rows = index.search_features(geometry, fq, 10)
    full = geometry.score(fq.astype(np.float64), keys.astype(np.float64))
    naive_best = -np.sort(-full, axis=1)[:, :10]
    scale = np.abs(full).max()
    np.testing.assert_allclose(scores, np.take_along_axis(full, rows, 1), atol=1e-5 * scale)
    np.testing.assert_allclose(scores, naive_best, atol=1e-5 * scale)
    assert np.all(np.diff(scores, axis=1) <= 1e-6 * scale)  # best first


@pytest.mark.parametrize("index_kind", ["hnsw", "ivf"])
@pytest.mark.parametrize("kind", ["softmax", "gaussian", "gmm"])
def test_approximate_recall_at_10_against_exact_on_unseen_queries(kind, index_kind, world):
    geometry, keys, fq = geometry_of(kind, world)
    index = build_index(geometry, keys, index_kind, AnnConfig(threads=1))
    assert index.search_effort > 0 and index.stats.tuned_recall >= 0.97
    queries = geometry.query_vectors(fq)
    truth = exact_top_k(queries, keys, 10)
    scores, rows = index.search(queries, 10)
    assert recall_at_k(rows, queries, keys, truth, 10) >= 0.95
    # returned scores are exact inner products, best first
    np.testing.assert_allclose(
        scores, np.einsum("nkf,nf->nk", keys[rows].astype(np.float64), queries), rtol=1e-4,
        atol=1e-4 * np.abs(truth[0]).max(),
    )  # fmt: skip
    assert np.all(np.diff(scores, axis=1) <= 0)


@pytest.mark.parametrize("index_kind", ["exact", "hnsw"])
def test_allowed_mask_restricts_results_to_the_filtered_rows(index_kind, world):
    geometry, keys, fq = geometry_of("softmax", world)
    # exact_filter_rows=0: the approximate index searches even this filter through FAISS
    config = AnnConfig(threads=1, search_effort=256, exact_filter_rows=0)
    index = build_index(geometry, keys, index_kind, config)
    allowed = np.random.default_rng(3).random(GALLERY) < 0.3
    queries = geometry.query_vectors(fq[:40])
    scores, rows = index.search(queries, 10, allowed=allowed)
    assert rows.shape == (40, 10) and np.all(allowed[rows])
    masked = np.where(
        allowed[None, :], queries.astype(np.float64) @ keys.T.astype(np.float64), -np.inf
    )
    best = -np.sort(-masked, axis=1)[:, :10]
    hits = np.isclose(scores, best, rtol=1e-4, atol=1e-3).mean()
    assert hits >= (1.0 if index_kind == "exact" else 0.95)
    few = np.zeros(GALLERY, dtype=bool)
    few[[5, 17, 300]] = True
    scores, rows = index.search(queries[:2], 10, allowed=few)
    assert rows.shape == (2, 3) and set(rows[0]) == {5, 17, 300}
    assert index.search(queries[:2], 10, allowed=np.zeros(GALLERY, bool))[1].shape == (2, 0)


@pytest.mark.parametrize("index_kind", ["exact", "hnsw"])
@pytest.mark.parametrize("kind", ["softmax", "gaussian"])
def test_float16_features_are_indexed_without_a_float32_copy(kind, index_kind, world):
    """Features held in float16 (SearchConfig.storage_dtype) stay the rows the index re-scores;
    returned scores are the exact inner products with those float16 rows."""
    geometry, keys, fq = geometry_of(kind, world)
    half = keys.astype(np.float16)
    index = build_index(geometry, half, index_kind, AnnConfig(threads=1))
    assert index._keys.dtype == np.float16 and np.shares_memory(index._keys, half)
    queries = geometry.query_vectors(fq)
    scores, rows = index.search(queries, 10)
    stored = half.astype(np.float64)
    exact = np.einsum("nkf,nf->nk", stored[rows], queries.astype(np.float64))
    np.testing.assert_allclose(scores, exact, rtol=1e-4, atol=1e-4 * np.abs(exact).max())
    truth = exact_top_k(queries, half, 11)
    assert truth[0].dtype == np.float32
    np.testing.assert_allclose(truth[0][:, :10], -np.sort(-(queries @ stored.T), axis=1)[:, :10],
                               rtol=1e-4, atol=1e-4 * np.abs(exact).max())  # fmt: skip
    assert recall_at_k(rows, queries, half, truth, 10) >= (1.0 if index_kind == "exact" else 0.95)


def test_k_larger_than_the_gallery_returns_every_row(world):
    geometry, keys, fq = geometry_of("gaussian", world)
    index = build_index(geometry, keys[:7], "hnsw", AnnConfig(threads=1))
    scores, rows = index.search(geometry.query_vectors(fq[:3]), 50)
    assert rows.shape == (3, 7) and all(set(r) == set(range(7)) for r in rows)


def test_augmented_keys_turn_inner_product_order_into_distance_order():
    rng = np.random.default_rng(4)
    keys = (rng.standard_normal((300, 9)) * rng.uniform(0.1, 5.0, (300, 1))).astype(np.float32)
    query = rng.standard_normal(9)
    augmented = augmented_keys(keys).astype(np.float64)
    norms = np.linalg.norm(augmented, axis=1)
    np.testing.assert_allclose(norms, norms.max(), rtol=1e-5)
    distances = np.linalg.norm(augmented - np.append(query, 0.0), axis=1)
    inner = keys.astype(np.float64) @ query
    np.testing.assert_array_equal(np.argsort(distances)[:20], np.argsort(-inner)[:20])


def test_recall_counts_ties_and_excludes_the_own_row():
    keys = np.array([[1.0, 0], [0.5, 0], [0.5, 0], [0.2, 0], [0.0, 1]], dtype=np.float32)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    truth = exact_top_k(query, keys, 3)
    assert truth[1].tolist() == [[0, 1, 2]]
    assert recall_at_k([[0, 2]], query, keys, truth, 2) == 1.0  # rows 1 and 2 tie for second
    assert recall_at_k([[0, 3]], query, keys, truth, 2) == 0.5
    assert recall_at_k([[3, 1]], query, keys, truth, 2) == 0.5
    assert recall_at_k([[0, 1, 3]], query, keys, truth, 2, exclude=[0]) == 0.5
    assert recall_at_k([[0, 2, 1]], query, keys, truth, 2, exclude=[0]) == 1.0


def test_bad_input_names_the_problem(world):
    geometry, keys, fq = geometry_of("softmax", world)
    with pytest.raises(ValueError, match="unknown index kind 'annoy'"):
        build_index(geometry, keys, "annoy")
    with pytest.raises(ValueError, match="features have"):
        build_index(geometry, keys[:, :5], "exact")
    with pytest.raises(ValueError, match="gallery is empty"):
        build_index(geometry, keys[:0], "exact")
    broken = keys.copy()
    broken[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        build_index(geometry, broken, "exact")
    index = build_index(geometry, keys, "exact")
    with pytest.raises(ValueError, match="query vectors have shape"):
        index.search(fq[:, :4], 10)
    with pytest.raises(ValueError, match="allowed mask has 3 entries"):
        index.search(geometry.query_vectors(fq[:1]), 10, allowed=[True, False, True])
    with pytest.raises(ValueError, match="k must be at least 1"):
        index.search(geometry.query_vectors(fq[:1]), 0)
    with pytest.raises(ValueError, match="target_recall"):
        AnnConfig(target_recall=1.5)
