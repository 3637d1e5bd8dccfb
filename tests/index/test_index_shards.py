"""What each shard of the Ray search backend computes, without Ray: the shards' eligible rows put
end to end are the single-process search's, each shard's feature rows are the whole file's rows,
and the merge of the shards' top k is the single-process ranking (ties by image id). The Ray
cluster itself is tested in tests/scale/test_scale_ray_search.py."""

from __future__ import annotations

import datetime as dt

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


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.geometry}-{r.finding}")
@pytest.mark.parametrize("shards", [1, 3, 7])
def test_shards_rank_as_the_single_process_search(service, request_, shards) -> None:
    want = service.search(request_)
    gallery = service.gallery
    finding = canonical_finding(request_.finding)
    query, own_row = service._query_embedding(request_, gallery)
    anchor_set = service.anchors.anchor_set(finding, None)
    geometry, features, key = service._features(parse_geometry(request_.geometry), anchor_set,
                                                gallery)  # fmt: skip
    vector, offset = service.query_vector(geometry, features, query, request_, gallery)
    exclusions = service.exclusions(request_, gallery, own_row)
    whole_mask = service._eligible(request_, finding, gallery, own_row)
    _, entry = service.index.served_entry(gallery, key)
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
