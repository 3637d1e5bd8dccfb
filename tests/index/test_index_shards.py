"""What each shard of the Ray search backend computes, without Ray: the shards' eligible rows put
end to end are the single-process search's, each shard's feature rows are the whole file's rows,
and the merge of the shards' top k is the single-process ranking (ties by image id). The Ray
cluster itself is tested in tests/scale/test_scale_ray_search.py."""

from __future__ import annotations

import datetime as dt
import threading

import numpy as np
import pytest
from index_fixtures import make_store, stand_in

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit.config import AuditConfig
from chexretrieve.density.config import DensityConfig
from chexretrieve.distributed.ray_search import (
    ShardGallery,
    merge_top_k,
    shard_bounds,
    shard_keys,
)
from chexretrieve.findings import canonical_finding
from chexretrieve.index import IndexConfig
from chexretrieve.search.features import parse_geometry
from chexretrieve.search.gallery import SearchFilters, eligible_mask
from chexretrieve.search.scoring import rank_exactly
from chexretrieve.search.service import SearchRequest

N = 700


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("index-shards")
    store = make_store(tmp / "archive.sqlite", N)
    config = AppConfig(encoder="stand-in:0:32", audit=AuditConfig(enabled=False),
                       density=DensityConfig(enabled=False),
                       index=IndexConfig(density=False))  # fmt: skip
    yield open_search_app(config, store=store, encoder=stand_in()).service
    store.close()


REQUESTS = [
    SearchRequest(finding="Pleural Effusion", geometry="softmax", case_id=7, top_k=25),
    SearchRequest(finding="Edema", geometry="gaussian", case_id=400, top_k=10,
                  filters=SearchFilters(views=("PA",), sex="F", age_min=30, age_max=70)),
    SearchRequest(finding="Cardiomegaly", geometry="cosine", case_id=650, top_k=12,
                  filters=SearchFilters(date_from=dt.date(2019, 6, 1), label_known=True)),
    SearchRequest(finding="Edema", geometry="gmm", top_k=15, exclude_ids=(3, 200, 699),
                  image_embedding=np.random.default_rng(2).standard_normal(32).astype(np.float32),
                  query_study_uid="1.2.826.0.8.10"),
]  # fmt: skip


def _prepared(service, request_):
    """What the driver computes for a request (``RaySearchBackend.rank``): gallery, finding,
    fitted geometry, gallery features, query vector and offset, exclusions, the index entry's
    name and record."""
    gallery = service.gallery
    finding = canonical_finding(request_.finding)
    query, own_row = service._query_embedding(request_, gallery)
    anchor_set = service.anchors.anchor_set(finding, None)
    geometry, features, key = service._features(parse_geometry(request_.geometry), anchor_set,
                                                gallery)  # fmt: skip
    vector, offset = service.query_vector(geometry, features, query, request_, gallery)
    exclusions = service.exclusions(request_, gallery, own_row)
    name, entry = service.index.served_entry(gallery, key)
    return gallery, finding, geometry, features, vector, offset, exclusions, name, entry


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.geometry}-{r.finding}")
@pytest.mark.parametrize("shards", [1, 3, 7])
def test_shards_rank_as_the_single_process_search(service, request_, shards) -> None:
    want = service.search(request_)
    gallery, finding, _, features, vector, offset, exclusions, _, entry = _prepared(
        service, request_
    )
    query, own_row = service._query_embedding(request_, gallery)
    whole_mask = service._eligible(request_, finding, gallery, own_row)
    parts, masks = [], []
    for start, stop in shard_bounds(len(gallery), shards):
        shard = ShardGallery(gallery.manifest, start, stop)
        keys = shard_keys(gallery.manifest.folder, entry, start, stop)
        np.testing.assert_array_equal(keys.array, features.array[start:stop])
        mask = eligible_mask(shard, request_.filters, finding, exclusions, start)
        masks.append(mask)
        rows, scores, _ = rank_exactly(keys, vector, offset, mask, int(mask.sum()),
                                       request_.top_k, shard.image_ids)  # fmt: skip
        parts.append((rows + start, scores, shard.image_ids[rows], int(mask.sum())))
    np.testing.assert_array_equal(np.concatenate(masks), whole_mask)
    rows, scores, candidates = merge_top_k(parts, request_.top_k)
    assert candidates == want.candidates
    assert gallery.image_ids[rows].tolist() == [hit.image_id for hit in want.hits]
    np.testing.assert_allclose(scores, [hit.score for hit in want.hits], rtol=1e-12)


def test_the_merge_breaks_ties_by_image_id_across_shards() -> None:
    """Equal scores in different shards: the lower image id first, as one process orders them;
    compared with a naive sort of every (score, id) pair."""
    rng = np.random.default_rng(0)
    parts, pairs = [], []
    for shard in range(4):
        ids = rng.choice(10_000, 6, replace=False).astype(np.int64)
        scores = rng.choice([0.5, 0.25, 0.125], 6)  # many ties across shards
        order = np.lexsort((ids, -scores))
        parts.append((ids[order] + 100_000 * shard, scores[order], ids[order], 6))
        pairs += list(zip(-scores, ids, strict=True))
    rows, scores, candidates = merge_top_k(parts, 9)
    naive = sorted(pairs)[:9]
    assert candidates == 24
    assert [(-s, i) for s, i in zip(scores, rows % 100_000, strict=True)] == naive


def test_shard_bounds_cover_every_row_once() -> None:
    for rows, shards in ((10, 3), (2, 5), (0, 2), (1_000_003, 4)):
        bounds = shard_bounds(rows, shards)
        assert len(bounds) == shards and bounds[0][0] == 0 and bounds[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
        sizes = [stop - start for start, stop in bounds]
        assert max(sizes) - min(sizes) <= 1


def _shard_query(service, request_, shards: int, kind: str):
    """(ShardQuery for shard 0 of ``shards`` with the records themselves as their refs,
    the single-process ranking of shard 0's rows)."""
    from chexretrieve.distributed.ray_search import ShardQuery

    gallery, finding, geometry, _, vector, offset, exclusions, name, entry = _prepared(
        service, request_
    )
    job = ShardQuery(generation=gallery.manifest.generation, manifest_ref=[gallery.manifest],
                     entry_name=name, entry_ref=[entry], vector=np.asarray(vector, np.float32),
                     offset=float(offset), k=request_.top_k, filters=request_.filters,
                     finding=finding, exclusions=exclusions, index_kind=kind, index_min_rows=0,
                     geometry_ref=[geometry])  # fmt: skip
    start, stop = shard_bounds(len(gallery), shards)[0]
    shard = ShardGallery(gallery.manifest, start, stop)
    keys = shard_keys(gallery.manifest.folder, entry, start, stop)
    mask = eligible_mask(shard, request_.filters, finding, exclusions, start)
    rows, scores, _ = rank_exactly(keys, vector, offset, mask, int(mask.sum()), request_.top_k,
                                   shard.image_ids)  # fmt: skip
    return job, (shard.image_ids[rows].tolist(), scores)


def test_a_shard_ranks_exactly_while_its_ann_index_is_built_in_the_background(
    service, monkeypatch
) -> None:
    """The first search of an entry starts the shard's index build and is answered exactly at
    once; once built, the index answers (FAISS's exact kind: the same ranking)."""
    from chexretrieve import ann
    from chexretrieve.distributed import ray_search

    monkeypatch.setattr(ray_search, "_fetch", lambda ref: ref)  # the records, not Ray refs
    release, started = threading.Event(), []
    real_build = ann.build_index

    def held_build(*args, **kwargs):  # the build ends only when the test says so
        started.append(args)
        release.wait(60)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(ann, "build_index", held_build)
    job, (want_ids, want_scores) = _shard_query(service, REQUESTS[0], 3, "exact")
    ranker = ray_search.ShardRanker(0, 3)
    for _ in range(2):  # the build is held: both searches are answered exactly, one build
        _, scores, ids, _ = ranker.rank(job)
        assert ids.tolist() == want_ids
        np.testing.assert_allclose(scores, want_scores, rtol=1e-12)
    assert len(started) == 1 and ranker.wait_for_indexes(0.01)["building"] == 1
    release.set()
    state = ranker.wait_for_indexes(60)
    assert state == {"shard": 0, "building": 0, "built": [job.entry_name], "failed": {}}
    stamp = (job.generation, job.entry_name, "exact")
    used = []
    index = ranker._indexes[stamp]

    class Spy:
        def search(self, *args, **kwargs):
            used.append(1)
            return index.search(*args, **kwargs)

    ranker._indexes[stamp] = Spy()
    _, scores, ids, _ = ranker.rank(job)
    assert used == [1] and ids.tolist() == want_ids
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5)


def test_a_shard_whose_index_build_fails_keeps_ranking_exactly_and_does_not_retry(
    service, monkeypatch
) -> None:
    from chexretrieve import ann
    from chexretrieve.distributed import ray_search

    monkeypatch.setattr(ray_search, "_fetch", lambda ref: ref)
    calls = []

    def failing_build(*args, **kwargs):
        calls.append(1)
        raise MemoryError("no room for the graph")

    monkeypatch.setattr(ann, "build_index", failing_build)
    job, (want_ids, _) = _shard_query(service, REQUESTS[1], 2, "hnsw")
    ranker = ray_search.ShardRanker(0, 2)
    assert ranker.rank(job)[2].tolist() == want_ids
    state = ranker.wait_for_indexes(60)
    assert state["built"] == [] and state["building"] == 0
    assert state["failed"] == {job.entry_name: "MemoryError: no room for the graph"}
    for _ in range(2):
        assert ranker.rank(job)[2].tolist() == want_ids
    assert ranker.wait_for_indexes(60)["building"] == 0 and calls == [1]
