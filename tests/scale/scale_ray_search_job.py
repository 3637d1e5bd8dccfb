"""The searches of the Ray search backend's multi-node test, and its driver.

Run as a script inside the test cluster's network namespace (the driver of a Ray cluster must
reach it at the address its nodes advertise): ``python scale_ray_search_job.py SPEC OUT``
opens the store with ``--search-backend ray``, runs every search of ``cases()`` and writes the
hits, candidate counts and the shards' placement as JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np

#: the geometries compared (a plain one, the softmax default, quadratic ones, a mixture)
GEOMETRIES = ("softmax", "cosine", "gaussian", "gmm")
#: the searches also ranked by an HNSW index per shard
ANN_CASES = ("softmax-case", "gaussian-case", "cosine-filters")


def cases():
    """(name, SearchRequest): by archived case (own study excluded), with filters, by upload
    with its study UID excluded and named exclusions."""
    from chexretrieve.search.gallery import SearchFilters
    from chexretrieve.search.service import SearchRequest

    views = SearchFilters(views=("PA",), sex="F", age_min=30, age_max=70)
    dates = SearchFilters(date_from=dt.date(2019, 6, 1), date_to=dt.date(2020, 6, 1),
                          label_known=True)  # fmt: skip
    upload = np.random.default_rng(5).standard_normal(32).astype(np.float32)
    for geometry in GEOMETRIES:
        yield (
            f"{geometry}-case",
            SearchRequest(finding="Pleural Effusion", geometry=geometry, case_id=7, top_k=25),
        )
        yield (
            f"{geometry}-filters",
            SearchRequest(finding="Edema", geometry=geometry, case_id=901, top_k=10, filters=views),
        )
        yield (
            f"{geometry}-dates",
            SearchRequest(
                finding="Cardiomegaly", geometry=geometry, case_id=1200, top_k=12, filters=dates
            ),
        )
    yield "upload", SearchRequest(
        finding="Pleural Effusion", geometry="gaussian", image_embedding=upload, top_k=20,
        query_study_uid="1.2.826.0.8.10", exclude_ids=(3, 500, 1499),
    )  # fmt: skip


def app_config(spec: dict, backend: str, index_kind: str = "none"):
    from chexretrieve.app import AppConfig
    from chexretrieve.audit.config import AuditConfig
    from chexretrieve.density.config import DensityConfig
    from chexretrieve.index import IndexConfig
    from chexretrieve.search.config import SearchConfig, ShardedSearchConfig

    sharding = ShardedSearchConfig(
        backend=backend, ray_address=spec.get("address"), shards=spec["shards"],
        pin_resource=spec.get("pin", ""),
    )  # fmt: skip
    return AppConfig(
        db_url=spec["db"],
        encoder="stand-in:0:32",
        search=SearchConfig(
            feature_cache_dir=Path(spec["features"]),
            sharding=sharding,
            index_kind=index_kind,
            index_min_gallery=0,
        ),  # fmt: skip
        audit=AuditConfig(enabled=False),
        density=DensityConfig(enabled=False),
        index=IndexConfig(feature_dtype=spec["dtype"], density=False),
    )


def answers(service, only: tuple[str, ...] = ()) -> dict:
    found = {}
    for name, request in cases():
        if only and name not in only:
            continue
        result = service.search(request)
        found[name] = {
            "ids": [hit.image_id for hit in result.hits],
            "scores": [hit.score for hit in result.hits],
            "candidates": result.candidates,
        }
    return found


def main(spec_path: str, out_path: str) -> None:
    import ray

    from chexretrieve.app import open_search_app

    spec = json.loads(Path(spec_path).read_text())
    app = open_search_app(app_config(spec, "ray"))  # joins the cluster, starts the shards
    found = answers(app.service)
    placement = app.service.shards.placement()
    app.service.shards.close()
    # HNSW per shard (index_min_gallery=0): every shard starts building one in the background
    # at its first search of an entry and ranks exactly until it is built
    hnsw = open_search_app(app_config(spec, "ray", "hnsw"))
    while_built = answers(hnsw.service, ANN_CASES)
    built = hnsw.service.shards.wait_for_indexes(600)
    approximate = answers(hnsw.service, ANN_CASES)
    nodes = [node for node in ray.nodes() if node["Alive"]]
    hnsw.service.shards.close()
    out = {"answers": found, "placement": placement, "nodes": [n["NodeID"] for n in nodes],
           "hnsw_while_built": while_built, "hnsw_built": built,
           "hnsw": approximate}  # fmt: skip
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
