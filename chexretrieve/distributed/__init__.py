"""Distributed ingest on a Ray cluster (``chexretrieve ingest --executor ray``).

``ingest_paths_with_ray`` splits the files into shards and ingests each shard in a Ray task with
the ordinary pipeline; imported lazily so that Ray loads only when it is used.
"""

from __future__ import annotations


def ingest_paths_with_ray(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    from chexretrieve.distributed.ray_ingest import ingest_paths_with_ray as run

    return run(*args, **kwargs)


__all__ = ["ingest_paths_with_ray"]
