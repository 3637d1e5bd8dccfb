"""Gallery storage in float32 / float16 (SearchConfig.storage_dtype) and the KeyMatrix scan.

References are plain float64 numpy on the stored rows (independent of FAISS), and the float32
service for the float16 one."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from test_search_service import FakeAnchors, FakeEncoder, make_gallery

from chexretrieve.search.config import SearchConfig
from chexretrieve.search.features import parse_geometry
from chexretrieve.search.scoring import KeyMatrix
from chexretrieve.search.service import SearchRequest, SearchService


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_key_matrix_top_k_is_the_exact_top_k_of_the_stored_rows(dtype):
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((3000, 37)).astype(np.float32)
    keys = KeyMatrix.from_rows(rows, dtype)
    assert keys.array.dtype == dtype and keys.array.shape == rows.shape
    stored = keys.array.astype(np.float64)
    rounding = 1e-3 if dtype == "float16" else 0.0
    np.testing.assert_allclose(stored, rows, rtol=rounding, atol=1e-7)
    allowed = rng.random(3000) < 0.2
    for mask in (None, allowed):
        query = rng.standard_normal(37)
        reference = stored @ query
        if mask is not None:
            reference = np.where(mask, reference, -np.inf)
        scores, found = keys.top_k(query, 10, mask)
        assert list(found) == list(np.argsort(-reference, kind="stable")[:10])
        np.testing.assert_allclose(scores, reference[found], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(keys.inner_products(query), stored @ query, rtol=1e-5, atol=1e-5)
    # fewer allowed rows than asked for: only those come back
    few = np.zeros(3000, dtype=bool)
    few[[5, 17]] = True
    assert sorted(keys.top_k(rng.standard_normal(37), 10, few)[1]) == [5, 17]
    with pytest.raises(ValueError, match="allowed mask has shape"):
        keys.top_k(np.ones(37), 3, np.ones(5, dtype=bool))
    with pytest.raises(ValueError, match="37 wide"):
        keys.top_k(np.ones(4), 3)


@pytest.mark.parametrize("width", [64, 37])  # 37: float16 rows held zero-padded for SIMD
def test_key_matrix_round_trips_stored_rows_and_keeps_its_memory_alive(width):
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((5000, width))
    keys = KeyMatrix.from_rows(rows, "float16")
    assert keys.array.shape == (5000, width)
    np.testing.assert_allclose(keys.array, rows, rtol=1e-3, atol=1e-7)  # FAISS's rounding
    assert keys.nbytes >= keys.array.nbytes
    copy = KeyMatrix.from_stored(np.array(keys.array))
    assert copy.array.dtype == np.float16 and np.array_equal(copy.array, keys.array)
    query = rng.standard_normal(width)
    reference = copy.array.astype(np.float64) @ query
    assert list(copy.top_k(query, 5)[1]) == list(np.argsort(-reference, kind="stable")[:5])
    assert KeyMatrix.owning(copy.array[:, : width - 1]) is None
    assert KeyMatrix.owning(copy.array) is not None  # the full view maps back to its rows
    assert KeyMatrix.owning(copy.array[1:]) is None
    assert KeyMatrix.owning(np.array(copy.array)) is None
    part, expected = copy.array[100:200], np.array(copy.array[100:200])
    del copy
    gc.collect()
    _ = [rng.standard_normal((500, 500)) for _ in range(5)]  # reuse freed memory, if any was
    assert np.array_equal(part, expected)  # the view still holds the FAISS index's memory
    with pytest.raises(ValueError, match="unknown storage dtype 'int8'"):
        KeyMatrix(4, "int8")
    with pytest.raises(ValueError, match="unknown storage dtype 'bfloat16'"):
        SearchConfig(storage_dtype="bfloat16")


def _service(tmp_path, gallery, dtype, seed=1):
    rng = np.random.default_rng(seed)
    config = SearchConfig(feature_cache_dir=tmp_path / "features", storage_dtype=dtype)
    return SearchService(lambda: gallery, FakeAnchors(rng), FakeEncoder(rng), config=config)


def _clustered_gallery(n: int, seed: int):
    """make_gallery's rows replaced by noisy copies of 40 centres (near neighbours exist, as in
    real archives where many images look alike)."""
    gallery = make_gallery(n=n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    centres = rng.standard_normal((40, gallery.dim))
    rows = centres[rng.integers(0, 40, n)] + 0.6 * rng.standard_normal((n, gallery.dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    gallery.embeddings[:] = rows.astype(np.float32)
    return gallery


@pytest.mark.parametrize("geometry", ["cosine", "softmax", "gaussian", "gmm"])
def test_float16_storage_ranks_like_float32(tmp_path, geometry):
    gallery = _clustered_gallery(1500, seed=3)
    full = _service(tmp_path / "32", gallery, "float32")
    half = _service(tmp_path / "16", gallery, "float16")
    assert half.gallery.embeddings.dtype == np.float16
    assert full.gallery.embeddings.dtype == np.float32
    overlaps = []
    for case in range(100, 1600, 50):
        request = SearchRequest(finding="Edema", geometry=geometry, case_id=case, top_k=10)
        want, got = full.search(request), half.search(request)
        overlaps.append(len({h.image_id for h in want.hits} & {h.image_id for h in got.hits}))
        want_scores, _ = full.gallery_scores(request)
        scale = np.abs(want_scores).max()  # float16 rounding is relative to the scores' size
        for hit in got.hits:
            wanted = want_scores[gallery.row_of(hit.image_id)]
            assert hit.score == pytest.approx(wanted, abs=5e-3 * scale)
    assert np.mean(overlaps) / 10 >= 0.99, overlaps


def test_float16_features_persist_in_float16_and_reload(tmp_path):
    gallery = make_gallery(n=400, seed=5)
    first = _service(tmp_path, gallery, "float16")
    request = SearchRequest(finding="Edema", geometry="softmax", case_id=150, top_k=10)
    hits = first.search(request).hits
    assert first.cache.computed == 1
    files = list((tmp_path / "features").glob("*.npy"))
    assert len(files) == 1 and np.load(files[0]).dtype == np.float16
    again = _service(tmp_path, gallery, "float16")
    assert again.search(request).hits == hits and again.cache.computed == 0
    # a float32 service does not read the float16 file: it computes and writes its own
    full = _service(tmp_path, gallery, "float32")
    full.search(request)
    assert full.cache.computed == 1
    assert len(list((tmp_path / "features").glob("*.npy"))) == 2


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_relevance_feedback_score_is_the_rocchio_sum_of_scores(tmp_path, dtype):
    """The folded query vector gives s(q,k) + β·mean_r s(r,k) − γ·mean_n s(n,k), with s computed
    here pair by pair from the geometry and the stored features."""
    gallery = make_gallery(n=300, seed=6)
    svc = _service(tmp_path, gallery, dtype)
    request = SearchRequest(
        finding="Edema", geometry="gaussian", case_id=120, relevant=(130, 170), not_relevant=(200,)
    )
    scores, _ = svc.gallery_scores(request)
    plain, _ = svc.gallery_scores(SearchRequest(finding="Edema", geometry="gaussian", case_id=120))
    anchor_set = svc.anchors.anchor_set("Edema", None)
    geometry, features, _ = svc._features(parse_geometry("gaussian"), anchor_set, svc.gallery)
    keys = features.array.astype(np.float64)

    def s(image_id):
        return geometry.score(keys[[svc.gallery.row_of(image_id)]], keys)[0]

    config = svc.config
    expected = (
        plain
        + config.feedback_relevant_weight * (s(130) + s(170)) / 2
        - config.feedback_irrelevant_weight * s(200)
    )
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_split_scan_returns_the_single_scan_top_k(dtype, monkeypatch):
    """threads=3: three row ranges scanned at once and merged; the same top k as one scan and as
    float64 numpy on the stored rows, with and without a mask, ties across the ranges included."""
    monkeypatch.setattr("chexretrieve.search.scoring.SPLIT_MIN_BYTES", 4096)
    rng = np.random.default_rng(5)
    n = 3 * 4096 + 17
    rows = rng.standard_normal((n, 12)).astype(np.float32)
    rows[[5, n // 2, n - 1]] = rows[7]  # equal rows in every range
    keys = KeyMatrix.from_rows(rows, dtype)
    stored = keys.array.astype(np.float64)
    allowed = rng.random(n) < 0.3
    for query in (rng.standard_normal(12), rows[7].astype(np.float64)):
        for mask in (None, allowed):
            reference = stored @ query
            if mask is not None:
                reference = np.where(mask, reference, -np.inf)
            best = np.sort(reference)[::-1][:10]
            one_scores, one_rows = keys.top_k(query, 10, mask, threads=1)
            split_scores, split_rows = keys.top_k(query, 10, mask, threads=3)
            np.testing.assert_allclose(split_scores, best, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(one_scores, split_scores, rtol=0, atol=0)
            assert set(one_rows) == set(split_rows) or np.any(np.diff(best) == 0)
            if mask is not None:
                assert mask[split_rows].all()
            tied = reference == reference.max()
            assert tied[split_rows[: int(tied.sum())]].all()  # every tied best row comes first


def test_service_ranks_the_same_with_a_split_scan(tmp_path, monkeypatch):
    """SearchConfig.scan_threads: a gallery split into two scans ranks as with one thread,
    filters and the own-study exclusion included."""
    from chexretrieve.search.gallery import SearchFilters

    monkeypatch.setattr("chexretrieve.search.scoring.SPLIT_MIN_BYTES", 8192)
    gallery = _clustered_gallery(3000, seed=4)
    rankings = {}
    for threads in (1, 2):
        rng = np.random.default_rng(1)
        config = SearchConfig(feature_cache_dir=tmp_path / "features", scan_threads=threads)
        service = SearchService(lambda: gallery, FakeAnchors(rng), FakeEncoder(rng), config=config)
        rankings[threads] = [
            [h.image_id for h in service.search(request).hits]
            for request in (
                SearchRequest(finding="Edema", geometry=geometry, case_id=case, filters=filters)
                for geometry in ("cosine", "softmax")
                for case in (100, 1600, 3099)
                for filters in (SearchFilters(), SearchFilters(views=("AP",)))
            )
        ]
    assert rankings[1] == rankings[2]
    with pytest.raises(ValueError, match="scan_threads"):
        SearchConfig(scan_threads=-1)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_masked_top_k_is_exact_on_every_path(dtype, monkeypatch):
    """top_k with a mask scans without it for more rows and drops the disallowed ones when it
    can: a few excluded rows (always enough left), a broad filter (enough allowed among twice
    the expected count), a filter admitting only low scores (too few: the masked scan), a
    selective filter (the masked scan at once); every path gives float64 numpy's top k."""
    monkeypatch.setattr("chexretrieve.search.scoring.OVERSCAN_ROWS", 200)
    rng = np.random.default_rng(8)
    rows = rng.standard_normal((5000, 16)).astype(np.float32)
    keys = KeyMatrix.from_rows(rows, dtype)
    stored = keys.array.astype(np.float64)
    query = rng.standard_normal(16)
    exact = stored @ query
    order = np.argsort(-exact, kind="stable")
    few_out = np.ones(5000, dtype=bool)
    few_out[order[[0, 3, 4]]] = False
    low = np.zeros(5000, dtype=bool)
    low[order[2500:]] = True  # only the worse half: none among the best rows
    masks = {
        "few excluded": few_out,
        "broad": rng.random(5000) < 0.4,
        "low scores only": low,
        "selective": rng.random(5000) < 0.01,
    }
    for threads in (1, 3):
        for name, mask in masks.items():
            reference = np.where(mask, exact, -np.inf)
            want = np.sort(reference)[::-1][: min(10, int(mask.sum()))]
            scores, found = keys.top_k(query, 10, mask, threads=threads)
            assert mask[found].all(), name
            np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(scores, stored[found] @ query, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_rank_exactly_gives_each_results_standing_as_a_naive_count(dtype, k):
    """``standing``: how many eligible rows score at least as high as the result (ties included),
    from the top-k scan alone; against a count over every eligible row's score, with ties inside
    the top k, ties crossing the cut, a filter, and k past the candidates."""
    from chexretrieve.search.scoring import rank_exactly

    rng = np.random.default_rng(k)
    levels = rng.normal(size=(6, 8))  # six distinct rows, repeated: many exact ties
    rows = np.concatenate([levels[rng.integers(0, 6, 30)], rng.normal(size=(30, 8))])
    keys = KeyMatrix.from_rows(rows, dtype)
    vector = rng.normal(size=8).astype(np.float32)
    ids = rng.permutation(1000)[: len(rows)].astype(np.int64)
    naive_scores = keys.inner_products(vector).astype(np.float64)
    for mask in (np.ones(len(rows), bool), rng.random(len(rows)) < 0.6):
        candidates = int(mask.sum())
        found_rows, scores, standing = rank_exactly(
            keys, vector, 0.25, mask, candidates, min(k, candidates), ids
        )
        pool = naive_scores[mask]
        assert len(found_rows) == min(k, candidates)
        for row, n in zip(found_rows, standing, strict=True):
            assert n == int(np.count_nonzero(pool >= naive_scores[row])), (row, n)
        np.testing.assert_allclose(scores, naive_scores[found_rows] + 0.25, atol=1e-5)
