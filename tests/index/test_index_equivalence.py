"""The archive index answers exactly what the in-memory search answers (issue 31).

float32 features: the index's rankings and scores equal the in-memory service's (the store's
gallery, features computed per process), for every geometry family, with filters, feedback and
uploads. float16 features (the default): each stored number is the float32 feature rounded to
float16 (within half a unit in the last place), and the rankings equal a naive reference that
scores every row from those float16 numbers with numpy. The gallery's columns read back from the
index equal the store's.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from index_fixtures import ENCODER_ID, make_store, stand_in

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit.config import AuditConfig
from chexretrieve.density.config import DensityConfig
from chexretrieve.findings import FINDINGS
from chexretrieve.index import IndexConfig, index_folder, read_manifest
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.gallery import SearchFilters
from chexretrieve.search.service import SearchRequest
from chexretrieve.search.sources import gallery_from_store

N = 1500
GEOMETRIES = ("softmax", "cosine", "iti", "gaussian", "latent_gaussian", "movmf", "gmm")
FINDING = "Pleural Effusion"


def config(tmp_path, dtype: str, enabled: bool = True) -> AppConfig:
    return AppConfig(
        encoder="stand-in:0:32",
        search=SearchConfig(feature_cache_dir=tmp_path / f"features-{dtype}-{enabled}"),
        audit=AuditConfig(enabled=False),
        density=DensityConfig(candidates=(1, 2)),
        index=IndexConfig(enabled=enabled, feature_dtype=dtype, density=False),
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("index-equivalence")
    store = make_store(tmp / "archive.sqlite", N)
    encoder = stand_in()
    apps = {
        name: open_search_app(config(tmp, dtype, enabled), store=store, encoder=encoder)
        for name, (dtype, enabled) in {
            "index32": ("float32", True),
            "index16": ("float16", True),
            "memory": ("float32", False),
        }.items()
    }
    yield tmp, store, apps
    store.close()


def requests():
    views = SearchFilters(views=("PA",), sex="F", age_min=30, age_max=70)
    dates = SearchFilters(date_from=dt.date(2019, 6, 1), date_to=dt.date(2020, 6, 1),
                          label_known=True)  # fmt: skip
    for geometry in GEOMETRIES:
        yield SearchRequest(finding=FINDING, geometry=geometry, case_id=7, top_k=25)
        yield SearchRequest(finding="Edema", geometry=geometry, case_id=901, top_k=10,
                            filters=views)  # fmt: skip
    yield SearchRequest(finding=FINDING, geometry="softmax", case_id=300, top_k=15,
                        filters=dates, relevant=(12, 40), not_relevant=(99,))  # fmt: skip
    upload = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    yield SearchRequest(finding=FINDING, geometry="gaussian", image_embedding=upload, top_k=20,
                        query_study_uid="1.2.826.0.8.10")  # fmt: skip


def test_the_index_is_read_by_memory_map(world) -> None:
    _, store, apps = world
    gallery = apps["index32"].service.gallery
    assert type(gallery).__name__ == "IndexGallery"
    assert isinstance(gallery.embeddings, np.memmap)
    assert type(apps["memory"].service.gallery).__name__ == "Gallery"
    manifest = read_manifest(index_folder(store, ENCODER_ID, IndexConfig()))
    assert manifest.rows == N and manifest.revision == store.archive_revision()
    assert {e["finding"] for e in manifest.entries.values()} == set(FINDINGS)


@pytest.mark.parametrize("request_", list(requests()), ids=lambda r: f"{r.geometry}-{r.case_id}")
def test_float32_index_rankings_equal_the_in_memory_search(world, request_) -> None:
    _, _, apps = world
    got = apps["index32"].service.search(request_)
    want = apps["memory"].service.search(request_)
    assert [h.image_id for h in got.hits] == [h.image_id for h in want.hits]
    assert [h.score for h in got.hits] == [h.score for h in want.hits]
    assert got.candidates == want.candidates
    for mine, theirs in zip(got.hits, want.hits, strict=True):
        assert mine.labels == pytest.approx(theirs.labels, nan_ok=True)


def test_float16_features_are_the_float32_ones_rounded(world) -> None:
    _, _, apps = world
    for geometry in ("softmax", "gaussian", "cosine"):
        request = SearchRequest(finding=FINDING, geometry=geometry, case_id=7)
        apps["index16"].service.search(request)
        apps["index32"].service.search(request)
    manifest16 = apps["index16"].service.gallery.manifest
    manifest32 = apps["index32"].service.gallery.manifest
    from chexretrieve.index.entries import entry_keys

    for entry16 in manifest16.entries.values():
        if entry16["dtype"] != "float16" or entry16["finding"] != FINDING:
            continue
        name32 = entry16["file"]["file"]
        key = entry16["geometry_key"]
        twins = [e for e in manifest32.entries.values()
                 if e["geometry_key"] == key and e["dtype"] == "float32"]  # fmt: skip
        assert twins, name32
        half = entry_keys(manifest16.folder, entry16).array.astype(np.float64)
        full = entry_keys(manifest32.folder, twins[0]).array.astype(np.float64)
        rounded = full.astype(np.float16)
        ulp = np.spacing(np.abs(rounded)).astype(np.float64)
        assert np.all(np.abs(half - full) <= ulp / 2 + 1e-12), entry16["geometry"]


@pytest.mark.parametrize("geometry", ["softmax", "gaussian", "cosine"])
def test_float16_rankings_equal_a_naive_scan_of_the_stored_numbers(world, geometry) -> None:
    _, _, apps = world
    service = apps["index16"].service
    request = SearchRequest(finding=FINDING, geometry=geometry, case_id=44, top_k=30)
    result = service.search(request)
    gallery = service.gallery
    anchors = service.anchors.anchor_set(FINDING, None)
    from chexretrieve.search.features import parse_geometry

    geometry_, features, _ = service._features(parse_geometry(geometry), anchors, gallery)
    query = gallery.embeddings[gallery.row_of(44)].astype(np.float64)
    query /= np.linalg.norm(query)
    fq = geometry_.features(query[None, :].astype(np.float32))
    vector = geometry_.query_vectors(fq)[0].astype(np.float32)
    offset = float(geometry_.query_offsets(fq)[0])
    stored = np.asarray(features.array, dtype=np.float32)  # the float16 numbers, widened
    scores = stored @ vector  # numpy, not FAISS
    eligible = gallery.study_codes != gallery.study_codes[gallery.row_of(44)]
    order = np.lexsort((gallery.image_ids, -np.where(eligible, scores, -np.inf)))[:30]
    assert [h.image_id for h in result.hits] == gallery.image_ids[order].tolist()
    np.testing.assert_allclose([h.score for h in result.hits], scores[order] + offset,
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_the_columns_read_back_equal_the_store(world) -> None:
    _, store, apps = world
    gallery = apps["index32"].service.gallery
    stored = gallery_from_store(store, ENCODER_ID)
    assert gallery.image_ids.tolist() == stored.image_ids.tolist()
    np.testing.assert_array_equal(gallery.embeddings, stored.embeddings)
    rows = np.arange(0, N, 7)
    mine = gallery.metadata_records(rows)
    theirs = stored.metadata.iloc[rows]
    for column in theirs.columns:
        got = [record[column] for record in mine]
        for a, b in zip(got, theirs[column].tolist(), strict=True):
            missing = b is None or (isinstance(b, float) and np.isnan(b))
            assert (a is None) if missing else a == b, (column, a, b)
    labels = stored.labels
    for finding in FINDINGS:
        np.testing.assert_array_equal(gallery.label_values(finding), labels[finding].to_numpy())
    unlabelled = ~labels.notna().any(axis=1).to_numpy()
    assert np.array_equal(gallery.label_codes()[:, 0] == -3, unlabelled)
    assert gallery.category_values("view_position") == ["PA", "AP", "LATERAL", "pa"]


def test_a_calibration_is_read_from_the_index_not_measured(world, monkeypatch) -> None:
    _, _, apps = world
    service = apps["index16"].service
    request = SearchRequest(finding=FINDING, geometry="softmax", case_id=7)
    monkeypatch.setattr(service, "measure_calibration", lambda *a: pytest.fail("measured"))
    stored = service.rank_calibration(request, 12)
    assert stored is not None and len(stored.positive.probabilities) == 12
    monkeypatch.undo()
    measured = apps["memory"].service.rank_calibration(request, 12)
    assert stored.n_queries == measured.n_queries
    assert (stored.prevalence, stored.n_labelled) == (measured.prevalence, measured.n_labelled)
    for curve in ("positive", "negative", "any_query"):  # float16 features: near ties may swap
        np.testing.assert_allclose(
            getattr(stored, curve).probabilities, getattr(measured, curve).probabilities, atol=0.02
        )


def test_the_sampled_nearest_cosines_are_the_ones_calibration_asks_for(world) -> None:
    """The index computes every sampled query's nearest cosine in one pass; they are the rows
    ``calibrate`` samples, with the values a scan per row gives."""
    from chexretrieve.index.builder import sampled_nearest
    from chexretrieve.search.calibration import calibrate

    _, _, apps = world
    service = apps["index32"].service
    gallery = service.gallery
    labels = gallery.label_values(FINDING)
    found = sampled_nearest(gallery, labels, service.config)
    keys = gallery.embedding_keys()
    asked = []

    def nearest_of(row, eligible):
        asked.append(row)
        best, _ = keys.top_k(keys.rows([row])[0], 1, eligible)
        return float(best[0])

    def scores_of(image_id):
        scores, eligible = service.gallery_scores(
            SearchRequest(finding=FINDING, geometry="cosine", case_id=image_id)
        )
        return scores, eligible

    calibrate(scores_of, gallery.image_ids, labels, None, 5, service.config.calibration_queries,
              service.config.fit_seed, nearest_of=nearest_of)  # fmt: skip
    assert sorted(asked) == sorted(found)
    for row in asked:
        best, _ = keys.top_k(keys.rows([row])[0], 1,
                             gallery.study_codes != gallery.study_codes[row])  # fmt: skip
        assert found[row] == pytest.approx(float(best[0]), abs=1e-5)
