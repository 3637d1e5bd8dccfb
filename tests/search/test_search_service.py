"""The search service over an in-memory gallery with a real geometry and a fake anchor provider."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from chexretrieve.findings import FINDINGS
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.explain import explain_pair
from chexretrieve.search.features import GEOMETRY_CHOICES, parse_geometry
from chexretrieve.search.gallery import Gallery, SearchFilters
from chexretrieve.search.service import AnchorSetRef, SearchRequest, SearchService

D = 16


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class FakeAnchors:
    def __init__(self, rng: np.random.Generator):
        self.sets = {
            "v1": _unit(rng.standard_normal((12, D))),
            "v2": _unit(rng.standard_normal((12, D))),
        }
        self.prior = _unit(rng.standard_normal((80, D)))
        self.calls = 0

    def anchor_set(self, finding: str, key: str | None) -> AnchorSetRef:
        self.calls += 1
        version = key or "v1"
        if version not in self.sets:
            raise ValueError(f"no anchor set {version!r}")
        return AnchorSetRef(
            key=f"{finding}@{version}",
            content_hash=f"hash-{version}",
            sentences=tuple(f"{finding} sentence {i} ({version})" for i in range(12)),
            embeddings=self.sets[version],
        )

    def broad_prior(self):
        return "prior-hash", self.prior


class FakeEncoder:
    encoder_id = "fake:1"
    inv_temperature = 20.0
    embed_dim = D

    def __init__(self, rng):
        self.proj = rng.standard_normal((8 * 8, D))

    def embed_images(self, images):
        flat = np.stack([np.asarray(im, dtype=np.float64)[:8, :8].reshape(-1) for im in images])
        return _unit(flat @ self.proj).astype(np.float32)

    def embed_texts(self, texts):
        rng = np.random.default_rng(len(texts[0]))
        return _unit(rng.standard_normal((len(texts), D))).astype(np.float32)


def make_gallery(n: int = 300, seed: int = 0) -> Gallery:
    rng = np.random.default_rng(seed)
    emb = _unit(rng.standard_normal((n, D))).astype(np.float32)
    ids = np.arange(100, 100 + n, dtype=np.int64)
    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.{i // 2}" for i in range(n)],  # two images per study
            "view_position": np.where(np.arange(n) % 3 == 0, "AP", "PA"),
            "patient_sex": np.where(np.arange(n) % 2 == 0, "M", "F"),
            "patient_age_years": 20 + (np.arange(n) % 60).astype(float),
            "study_date": [dt.date(2020, 1, 1) + dt.timedelta(days=int(i)) for i in range(n)],
            "split": "train",
        },
        index=ids,
    )
    labels = pd.DataFrame(
        rng.choice([1.0, 0.0, np.nan], size=(n, len(FINDINGS))), columns=list(FINDINGS), index=ids
    )
    return Gallery("fake:1", ids, emb, meta, labels)


@pytest.fixture
def service(tmp_path):
    rng = np.random.default_rng(1)
    gallery = make_gallery()
    anchors = FakeAnchors(rng)
    svc = SearchService(
        lambda: gallery,
        anchors,
        encoder=FakeEncoder(rng),
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )
    return svc


def naive_softmax_similarity(q, keys, anchors, inv_t):
    def logp(x):
        z = inv_t * x @ anchors.T
        z = z - z.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

    lq, lk = logp(q[None].astype(np.float64)), logp(keys.astype(np.float64))
    pq, pk = np.exp(lq), np.exp(lk)
    kl_qk = (pq * (lq - lk)).sum(axis=1)
    kl_kq = (pk * (lk - lq)).sum(axis=1)
    return -0.5 * (kl_qk + kl_kq)


def test_softmax_ranking_matches_naive_symmetrised_kl(service):
    gallery = service.gallery
    result = service.search(
        SearchRequest(finding="pleural effusion", geometry="softmax", case_id=105, top_k=20)
    )
    q = gallery.embeddings[gallery.row_of(105)]
    sims = naive_softmax_similarity(q, gallery.embeddings, service.anchors.sets["v1"], 20.0)
    own_study = gallery.metadata["study_uid"].iloc[gallery.row_of(105)]
    allowed = (gallery.metadata["study_uid"] != own_study).to_numpy()
    expected = gallery.image_ids[allowed][np.argsort(-sims[allowed], kind="stable")[:20]]
    assert [h.image_id for h in result.hits] == list(expected)
    assert result.finding == "Pleural Effusion"
    assert result.anchor_set == "Pleural Effusion@v1"
    np.testing.assert_allclose(
        [h.score for h in result.hits], np.sort(sims[allowed])[::-1][:20], rtol=1e-4, atol=1e-5
    )


def test_own_study_is_excluded(service):
    # image 105's study also holds image 104 (two images per study)
    result = service.search(
        SearchRequest(finding="Edema", geometry="cosine", case_id=105, top_k=50)
    )
    ids = {h.image_id for h in result.hits}
    assert 105 not in ids and 104 not in ids
    assert result.candidates == len(service.gallery) - 2


@pytest.mark.parametrize("geometry", GEOMETRY_CHOICES)
def test_every_geometry_searches(service, geometry):
    result = service.search(
        SearchRequest(finding="Cardiomegaly", geometry=geometry, case_id=110, top_k=5)
    )
    assert len(result.hits) == 5
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)
    assert result.geometry == geometry


def test_geometries_rank_differently(service):
    cosine = service.search(
        SearchRequest(finding="Edema", geometry="cosine", case_id=120, top_k=10)
    )
    soft = service.search(SearchRequest(finding="Edema", geometry="softmax", case_id=120, top_k=10))
    assert [h.image_id for h in cosine.hits] != [h.image_id for h in soft.hits]


def test_filters_apply(service):
    filters = SearchFilters(
        views=("AP",),
        sex="M",
        age_min=30,
        age_max=50,
        date_from=dt.date(2020, 2, 1),
        label_known=True,
    )
    result = service.search(
        SearchRequest(finding="Edema", geometry="softmax", case_id=101, top_k=200, filters=filters)
    )
    assert result.hits
    for hit in result.hits:
        m = hit.metadata
        assert m["view_position"] == "AP" and m["patient_sex"] == "M"
        assert 30 <= m["patient_age_years"] <= 50
        assert m["study_date"] >= dt.date(2020, 2, 1)
        assert hit.labels["Edema"] is not None
    assert result.candidates == len(result.hits)


def test_features_are_cached_in_memory_and_on_disk(service, tmp_path):
    req = SearchRequest(finding="Edema", geometry="gaussian", case_id=101)
    first = service.search(req)
    assert service.cache.computed == 1
    service.search(req)
    assert service.cache.computed == 1
    # a fresh service over the same archive loads the persisted features instead of computing
    again = SearchService(
        lambda: service.gallery,
        service.anchors,
        encoder=service.encoder,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )
    second = again.search(req)
    assert again.cache.computed == 0
    assert [h.image_id for h in first.hits] == [h.image_id for h in second.hits]


def test_changed_anchor_set_or_archive_recomputes(service):
    service.search(SearchRequest(finding="Edema", geometry="softmax", case_id=101))
    service.search(SearchRequest(finding="Edema", geometry="softmax", case_id=101, anchor_set="v2"))
    assert service.cache.computed == 2
    bigger = make_gallery(n=310)
    service._load_gallery = lambda: bigger
    service.refresh()
    service.search(SearchRequest(finding="Edema", geometry="softmax", case_id=101))
    assert service.cache.computed == 3


def test_upload_and_text_queries(service):
    image = np.random.default_rng(3).random((32, 32)).astype(np.float32)
    by_image = service.search(SearchRequest(finding="Edema", image=image, top_k=5))
    assert len(by_image.hits) == 5
    with_text = service.search(
        SearchRequest(finding="Edema", image=image, text="large effusion", top_k=5)
    )
    assert [h.image_id for h in with_text.hits] != [h.image_id for h in by_image.hits]


def test_relevance_feedback_moves_marked_items(service):
    base = service.search(SearchRequest(finding="Edema", geometry="softmax", case_id=130, top_k=30))
    bottom = base.hits[-1].image_id
    top = base.hits[0].image_id
    moved = service.search(
        SearchRequest(
            finding="Edema",
            geometry="softmax",
            case_id=130,
            top_k=30,
            relevant=(bottom,),
            not_relevant=(top,),
        )
    )
    rank = {h.image_id: h.rank for h in moved.hits}
    assert rank.get(bottom, 99) < 30
    assert rank.get(top, 99) > 1


def test_explanations_sum_to_symmetrised_kl(service):
    result = service.search(
        SearchRequest(finding="Edema", geometry="softmax", case_id=101, top_k=3, explain=True)
    )
    for hit in result.hits:
        exp = hit.explanation
        assert exp is not None and len(exp.shared) == 5 and len(exp.differing) == 5
        assert exp.divergence == pytest.approx(-hit.score, rel=1e-3, abs=1e-5)
        assert all(t.divergence_term >= 0 for t in exp.differing)
        assert "Shared by query and result" in exp.as_text()


def test_explain_pair_terms_are_exact():
    rng = np.random.default_rng(5)
    anchors = _unit(rng.standard_normal((7, D)))
    q, k = _unit(rng.standard_normal((2, D)))
    exp = explain_pair(q, k, anchors, [f"s{i}" for i in range(7)], 10.0, top=7)
    sims = naive_softmax_similarity(q, k[None], anchors, 10.0)
    assert exp.divergence == pytest.approx(-sims[0], rel=1e-10)
    assert sum(t.divergence_term for t in exp.differing) == pytest.approx(exp.divergence)


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"geometry": "euclid", "case_id": 101}, "unknown geometry 'euclid'"),
        ({"case_id": 99999}, "case 99999 is not in the archive"),
        ({}, "give exactly one query"),
        ({"case_id": 101, "image_embedding": np.ones(D)}, "give exactly one query"),
        ({"image_embedding": np.ones(3) / np.sqrt(3)}, "has 3 dimensions"),
        ({"case_id": 101, "top_k": 0}, "top_k must be between 1 and 200"),
        ({"case_id": 101, "anchor_set": "v9"}, "no anchor set 'v9'"),
    ],
)
def test_bad_requests_say_what_is_wrong(service, request_kwargs, message):
    with pytest.raises(ValueError, match=message):
        service.search(SearchRequest(finding="Edema", **request_kwargs))


def test_bad_finding_and_filters(service):
    with pytest.raises(ValueError, match="unknown finding 'Broken Heart'"):
        service.search(SearchRequest(finding="Broken Heart", case_id=101))
    with pytest.raises(ValueError, match="age range is empty"):
        SearchFilters(age_min=60, age_max=20)
    with pytest.raises(ValueError, match="sex filter"):
        SearchFilters(sex="X")
    assert parse_geometry("Gaussian-Posterior").posterior
    # the evaluation's spelling names the same geometry; a posterior of a kind without one does not
    same = parse_geometry("latent_gaussian_posterior")
    assert parse_geometry("posterior_latent_gaussian") == same
    with pytest.raises(ValueError, match="unknown geometry 'posterior_movmf'"):
        parse_geometry("posterior_movmf")


def test_gallery_scores_are_what_search_ranks(service):
    request = SearchRequest(finding="Edema", geometry="gaussian", case_id=140, top_k=15)
    scores, eligible = service.gallery_scores(request)
    assert not eligible[service.gallery.row_of(140)]
    assert not eligible[service.gallery.row_of(141)]  # same study
    rows = np.flatnonzero(eligible)
    top = rows[np.argsort(-scores[rows], kind="stable")[:15]]
    result = service.search(request)
    assert [h.image_id for h in result.hits] == list(service.gallery.image_ids[top])


def test_a_case_ingested_after_the_gallery_loaded_is_found(tmp_path):
    rng = np.random.default_rng(2)
    archives = [make_gallery(n=300), make_gallery(n=320)]
    loads = []

    def load():
        loads.append(1)
        return archives[min(len(loads), 2) - 1]

    svc = SearchService(
        load,
        FakeAnchors(rng),
        encoder=FakeEncoder(rng),
        config=SearchConfig(feature_cache_dir=tmp_path / "f"),
    )
    svc.search(SearchRequest(finding="Edema", case_id=101))
    assert len(loads) == 1
    # image 410 arrived with the second load (ids 100..419): the service reloads once and finds it
    result = svc.search(SearchRequest(finding="Edema", case_id=410, top_k=5))
    assert len(loads) == 2 and len(result.hits) == 5
    with pytest.raises(ValueError, match="case 5000 is not in the archive"):
        svc.search(SearchRequest(finding="Edema", case_id=5000))


def test_concurrent_searches_after_a_reload_load_and_compute_once(tmp_path):
    """Twenty searches racing on a refreshed service: one gallery load, one geometry fit and one
    feature block; twenty racing for a case ingested after the load: one reload, all find it."""
    import threading
    import time

    rng = np.random.default_rng(3)
    archives = [make_gallery(n=300), make_gallery(n=340)]
    loads = []

    def load():
        loads.append(1)
        time.sleep(0.05)  # a database read: long enough for the others to pile up
        return archives[min(len(loads), 2) - 1]

    svc = SearchService(
        load,
        FakeAnchors(rng),
        encoder=FakeEncoder(rng),
        config=SearchConfig(feature_cache_dir=tmp_path / "f"),
    )
    errors, sizes = [], []

    def race(case_id: int) -> None:
        start = threading.Barrier(20)

        def user() -> None:
            start.wait()
            try:
                svc.search(SearchRequest(finding="Edema", geometry="gaussian", case_id=case_id))
                sizes.append(len(svc.gallery))
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=user) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    race(101)
    assert errors == []
    assert len(loads) == 1 and svc.cache.computed == 1
    race(430)  # image 430 is in the second archive only (ids 100..439)
    assert errors == [] and len(loads) == 2
    assert sizes[-20:] == [340] * 20
    with pytest.raises(ValueError, match="case 5000 is not in the archive"):
        svc.gallery_containing(5000).row_of(5000)


@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivf"])
def test_an_ann_index_ranks_like_the_exact_product(tmp_path, kind):
    """With an index the service returns the exact ranking (exact index) or nearly it (HNSW, IVF),
    the same scores on the rows it returns, the filters and the own-study exclusion; relevance
    feedback and galleries under index_min_gallery rank without it."""
    rng = np.random.default_rng(7)
    gallery, anchors, encoder = make_gallery(n=2000, seed=3), FakeAnchors(rng), FakeEncoder(rng)

    def make(**options):
        config = SearchConfig(feature_cache_dir=tmp_path / kind, **options)
        return SearchService(lambda: gallery, anchors, encoder=encoder, config=config)

    plain, indexed = make(), make(index_kind=kind, index_min_gallery=1000)
    filters = SearchFilters(views=("PA",), sex="F")
    overlaps = []
    for geometry in ("softmax", "gaussian", "gmm"):
        # the first search starts the build in the background and ranks exactly meanwhile
        first = SearchRequest(finding="Edema", geometry=geometry, case_id=1234, top_k=10)
        assert indexed.search(first) == plain.search(first)
        indexed.cache.wait_for_indexes()
        for case_id, extra in [(101, {}), (555, {"filters": filters}), (1900, {})]:
            request = SearchRequest(
                finding="Edema", geometry=geometry, case_id=case_id, top_k=10, **extra
            )
            want, got = plain.search(request), indexed.search(request)
            assert got.candidates == want.candidates
            exact = {h.image_id: h.score for h in want.hits}
            found = [h.image_id for h in got.hits]
            assert len(found) == 10 and len(set(found)) == 10
            study = gallery.metadata["study_uid"]
            assert all(study[i] != study[case_id] for i in found)
            if extra:
                assert all(h.metadata["view_position"] == "PA" for h in got.hits)
                assert all(h.metadata["patient_sex"] == "F" for h in got.hits)
            scores = plain.gallery_scores(request)[0]
            for hit in got.hits:
                assert hit.score == pytest.approx(scores[gallery.row_of(hit.image_id)], abs=1e-4)
            if kind == "exact":
                assert found == [h.image_id for h in want.hits]
            overlaps.append(len(set(found) & set(exact)) / 10)
    assert np.mean(overlaps) >= 0.9, overlaps
    assert len(indexed.cache._indexes) == 3  # one index per geometry
    capped = make(index_kind=kind, index_min_gallery=1000, index_cache_entries=2)
    for geometry in ("softmax", "gaussian", "gmm"):
        capped.search(SearchRequest(finding="Edema", geometry=geometry, case_id=101))
        capped.cache.wait_for_indexes()
    assert len(capped.cache._indexes) == 2  # the least recently used one was dropped
    feedback = SearchRequest(finding="Edema", case_id=101, relevant=(300,), top_k=10)
    assert [h.image_id for h in indexed.search(feedback).hits] == [
        h.image_id for h in plain.search(feedback).hits
    ]
    small = make(index_kind=kind, index_min_gallery=5000)
    small.search(SearchRequest(finding="Edema", case_id=101))
    assert len(small.cache._indexes) == 0
    with pytest.raises(ValueError, match="unknown index kind 'annoy'"):
        SearchConfig(index_kind="annoy")


def test_a_failed_index_build_leaves_exact_search_working(tmp_path, monkeypatch, caplog):
    import chexretrieve.ann

    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise MemoryError("no room for the graph")

    monkeypatch.setattr(chexretrieve.ann, "build_index", broken)
    rng = np.random.default_rng(8)
    gallery = make_gallery(n=400, seed=4)
    config = SearchConfig(feature_cache_dir=tmp_path, index_kind="hnsw", index_min_gallery=1)
    svc = SearchService(lambda: gallery, FakeAnchors(rng), encoder=FakeEncoder(rng), config=config)
    exact = SearchService(
        lambda: gallery,
        svc.anchors,
        encoder=svc.encoder,
        config=SearchConfig(feature_cache_dir=tmp_path),
    )
    request = SearchRequest(finding="Edema", case_id=150, top_k=10)
    for _ in range(3):
        assert svc.search(request) == exact.search(request)
        svc.cache.wait_for_indexes()
    assert len(calls) == 1  # not retried for the same archive
    assert list(svc.cache.index_failures.values()) == ["MemoryError: no room for the graph"]
    assert "searches rank exactly" in caplog.text


def test_posterior_latent_default_differs_from_cosine_and_a_cosine_twin_is_refused(service):
    """The default k (95%-variance rule on the posterior) ranks unlike cosine; an anchor set whose
    rule lands on k = d (isotropic anchors) is refused with the named error, not served as a
    cosine ranking under another name."""
    from chexretrieve.geometry import CosineEquivalentGeometryError

    for geometry in ("latent_gaussian_posterior", "latent_spherical_posterior"):
        ours = service.search(SearchRequest(finding="Edema", geometry=geometry, case_id=120))
        cosine = service.search(SearchRequest(finding="Edema", geometry="cosine", case_id=120))
        assert [h.image_id for h in ours.hits] != [h.image_id for h in cosine.hits]
    service.anchors.sets["iso"] = np.vstack([np.eye(D), -np.eye(D)])
    request = SearchRequest(
        finding="Edema", geometry="latent_gaussian_posterior", anchor_set="iso", case_id=120
    )
    with pytest.raises(CosineEquivalentGeometryError, match=f"k = {D} = d .*ranks exactly as"):
        service.search(request)
