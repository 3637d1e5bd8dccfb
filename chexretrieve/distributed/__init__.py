"""Ray: distributed ingest (``chexretrieve ingest --executor ray``) and search
(``--search-backend ray``).

``ingest_paths_with_ray`` splits the files into shards and ingests each shard in a Ray task with
the ordinary pipeline; ``ray_search_backend`` ranks searches in actors each holding one shard of
the archive index. Imported lazily so that Ray loads only when it is used.
"""

from __future__ import annotations


def ingest_paths_with_ray(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    from chexretrieve.distributed.ray_ingest import ingest_paths_with_ray as run

    return run(*args, **kwargs)


def ray_search_backend(index, search):  # noqa: ANN001, ANN201
    """The Ray search backend over ``index`` (``SearchConfig.sharding.backend == "ray"``),
    connected: a cluster that cannot be reached fails here, at start, in one sentence."""
    from chexretrieve.distributed.ray_search import ray_backend

    backend = ray_backend(index, search)
    backend.connect()
    return backend


__all__ = ["ingest_paths_with_ray", "ray_search_backend"]
