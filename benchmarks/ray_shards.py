"""The Ray search backend's shards on a simulated 10M-image archive: latency and memory per actor.

A synthetic archive index is written to a scratch folder with the index's own row-file writer
(``chexretrieve.index.rowfile``: ``.npy`` files with a SHA-256 per block, which every shard
verifies before it scans): image ids, study ids, the 13 findings' label codes, the view, sex and
age columns the filters read, and one feature entry of ``--width`` float16 numbers per image.
Width 99 is the softmax geometry's (the UI's default; ``benchmarks/ann.py``), stored padded to
FAISS's SIMD lanes (112 with AVX-512): 10M x 112 x 2 B = 2.24 GB. The embeddings file and the
store are left out: a shard never reads them (the driver reads the query's row).

The script starts a local Ray (one machine: every "node" of the figures is an actor process on
it), one ``ShardRanker`` actor per shard, and sends each query what ``RaySearchBackend.rank``
sends: the query vector, filters and exclusions (an own study of two images). It prints the
first query (each shard maps and verifies its rows), p50 / p95 of the next ones without and with
filters, the same top 10 scanned by one process over the whole file (equality and time), and each
actor's resident memory from /proc (RSS; its own anonymous pages; mapped file pages, shared
through the page cache), with the load average.

    nice -n 10 .venv/bin/python benchmarks/ray_shards.py                    # 10M rows, 4 shards
    nice -n 10 .venv/bin/python benchmarks/ray_shards.py --rows 1000000 --shards 2 --keep DIR

The scratch folder is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from chexretrieve.distributed.ray_search import (
    ShardQuery,
    ShardRanker,
    merge_top_k,
    process_memory,
)
from chexretrieve.findings import FINDINGS
from chexretrieve.index.manifest import Manifest
from chexretrieve.index.rowfile import HEADER_BYTES, RowAppender, new_record
from chexretrieve.search.gallery import Exclusions, SearchFilters
from chexretrieve.search.scoring import KeyMatrix, rank_exactly, stored_width

CHUNK = 1 << 19


def write_archive(folder: Path, rows: int, width: int, seed: int) -> Manifest:
    """The synthetic index generation (files and the manifest content a shard reads)."""
    rng = np.random.default_rng(seed)
    stored = stored_width(width, "float16")
    layout = {
        "image_ids": ("int64", 0),
        "study_ids": ("int64", 0),
        "labels": ("int8", len(FINDINGS)),
        "meta/view_position": ("int32", 0),
        "meta/patient_sex": ("int32", 0),
        "meta/patient_age_years": ("float64", 0),
        "features": ("float16", stored),
    }
    appenders = {
        name: RowAppender(folder, new_record(f"rows/{name}.0001.npy", dtype, w))
        for name, (dtype, w) in layout.items()
    }
    started = time.perf_counter()
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        ids = np.arange(start + 1, start + n + 1, dtype=np.int64)
        features = np.zeros((n, stored), dtype=np.float16)
        block = rng.standard_normal((n, width), dtype=np.float32)
        features[:, :width] = block / np.linalg.norm(block, axis=1, keepdims=True)
        chunk = {
            "image_ids": ids,
            "study_ids": (ids - 1) // 2,  # two images per study
            "labels": rng.choice(np.array([1, 0, -1, -2, -3], np.int8), (n, len(FINDINGS))),
            "meta/view_position": rng.integers(-1, 3, n).astype(np.int32),
            "meta/patient_sex": rng.integers(-1, 2, n).astype(np.int32),
            "meta/patient_age_years": rng.uniform(18, 95, n),
            "features": features,
        }
        for name, values in chunk.items():
            appenders[name].append(values)
        print(f"\rwriting {start + n:,} / {rows:,} rows", end="", flush=True)
    files = {}
    for name, appender in appenders.items():
        files[name] = appender.checkpoint().as_dict()
        appender.close()
    print(f"\rwrote {rows:,} rows in {time.perf_counter() - started:.0f} s" + " " * 20)
    feature = files.pop("features")
    content = {
        "rows": rows,
        "revision": 1,
        "files": files,
        "categories": {"view_position": ["PA", "AP", "LATERAL"], "patient_sex": ["M", "F"]},
        "bench_entry": {"file": feature, "width": width, "dtype": "float16"},
    }
    return Manifest(folder, 1, content)


def percentile_ms(values: list[float], q: float) -> float:
    return 1000 * float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--width", type=int, default=99)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="Scratch folder to keep.")
    args = parser.parse_args()

    import ray

    scratch = args.keep or Path(tempfile.mkdtemp(prefix="ray-shards-", dir="/tmp"))
    scratch.mkdir(parents=True, exist_ok=True)
    ray_tmp = tempfile.mkdtemp(prefix="rb-", dir="/tmp")
    os.environ["HOME"] = ray_tmp  # Ray writes its session token under $HOME
    try:
        manifest = write_archive(scratch, args.rows, args.width, args.seed)
        entry = manifest.content["bench_entry"]
        print(f"load average before: {os.getloadavg()}")
        ray.init(num_cpus=max(2, args.shards), include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1", _temp_dir=ray_tmp,
                 object_store_memory=200_000_000)  # fmt: skip
        actors = [ray.remote(ShardRanker).options(num_cpus=0).remote(k, args.shards)
                  for k in range(args.shards)]  # fmt: skip
        refs = {"manifest": [ray.put(manifest)], "entry": [ray.put(entry)]}
        rng = np.random.default_rng(args.seed + 1)
        own_row = 4_321
        exclusions = Exclusions(own_row=own_row, own_study=own_row // 2)
        filtered = SearchFilters(views=("PA",), sex="F", age_min=40, age_max=70)

        def job(vector, filters):
            return ShardQuery(1, refs["manifest"], "bench", refs["entry"], vector, 0.0,
                              args.top_k, filters, "Pleural Effusion", exclusions)  # fmt: skip

        def search(vector, filters):
            started = time.perf_counter()
            parts = ray.get([a.rank.remote(job(vector, filters)) for a in actors])
            return merge_top_k(parts, args.top_k), time.perf_counter() - started

        def query():
            vector = rng.standard_normal(args.width).astype(np.float32)
            return vector / np.linalg.norm(vector)

        started = time.perf_counter()
        ray.get([a.where.remote() for a in actors])
        print(f"{args.shards} actors started in {time.perf_counter() - started:.1f} s")
        first_vector = query()
        (rows, scores, _), first = search(first_vector, SearchFilters())
        print(f"first search (each shard maps and verifies its rows): {1000 * first:.0f} ms")
        times = {"no filter": [], "filters": []}
        for _ in range(args.queries):
            for name, filters in (("no filter", SearchFilters()), ("filters", filtered)):
                times[name].append(search(query(), filters)[1])
        for name, values in times.items():
            p50, p95 = percentile_ms(values, 50), percentile_ms(values, 95)
            print(f"{args.rows:,} rows / {args.shards} shards, {name}: p50 {p50:.0f} ms, "
                  f"p95 {p95:.0f} ms")  # fmt: skip

        # one process scanning the whole file: the same top k, and its time for the ratio
        record = manifest.content["bench_entry"]["file"]
        whole = KeyMatrix.mapped(scratch / record["file"], HEADER_BYTES, args.rows, args.width,
                                 int(record["width"]), "float16")  # fmt: skip
        ids = np.arange(1, args.rows + 1, dtype=np.int64)
        mask = (ids - 1) // 2 != own_row // 2  # the own study's rows (row // 2 is the study)
        whole_times = []
        for _ in range(3):
            started = time.perf_counter()
            candidates = int(mask.sum())
            local_rows, local_scores = rank_exactly(
                whole, first_vector, 0.0, mask, candidates, args.top_k, ids, 2
            )
            whole_times.append(time.perf_counter() - started)
        same = np.array_equal(local_rows, rows) and np.allclose(local_scores, scores)
        sharded = percentile_ms(times["no filter"], 50)
        single = 1000 * min(whole_times)
        print(f"top {args.top_k} equal to one process's scan of the whole file: {same}")
        print(f"one process, 2 scan threads, whole file: {single:.0f} ms (best of 3); "
              f"sharded p50 / single = {sharded / single:.2f}")  # fmt: skip

        placement = ray.get([a.where.remote() for a in actors])
        gib = 1 << 30
        for place in sorted(placement, key=lambda p: p["shard"]):
            print(f"shard {place['shard']} (pid {place['pid']}): RSS {place['rss'] / gib:.2f} GiB"
                  f" = own {place['anon'] / gib:.2f} GiB + mapped file pages "
                  f"{place['file'] / gib:.2f} GiB")  # fmt: skip
        driver = process_memory(os.getpid())
        print(f"driver (this process, also scanned the whole file): RSS {driver['rss'] / gib:.2f}"
              f" GiB, own {driver['anon'] / gib:.2f} GiB")  # fmt: skip
        print(f"load average after: {os.getloadavg()}")
        for actor in actors:
            ray.kill(actor)
        ray.shutdown()
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
