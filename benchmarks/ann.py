"""Gallery search through FAISS indexes: build time, memory, p95 latency and recall@10.

A synthetic archive of G unit image embeddings (d = 512, scattered around 64 directions, the way
one encoder's embeddings of chest radiographs crowd into a few regions) and N = 50 anchors is
turned into one geometry's gallery features (the softmax's are 99 wide; cosine's 512), in chunks
so that the embeddings are never all in memory. For each index kind the script reports the build
time (and tuning time of the search effort), the memory FAISS holds, the latency of one query at a
time (p50, p95) and of a batch, and recall@10 against the exact ranking (ties counted) on Q unseen
queries; ratios are to the exact index measured in the same run.

    .venv/bin/python benchmarks/ann.py                                  # 10k and 100k, softmax
    .venv/bin/python benchmarks/ann.py --sizes 10000 100000 1000000    # up to 1M items
    .venv/bin/python benchmarks/ann.py --geometry cosine --kinds exact hnsw
    .venv/bin/python benchmarks/ann.py --threads 0                     # every core for FAISS

Goal: approximate recall@10 >= 0.95 with p95 latency below the exact index's from G = 100k on.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from chexretrieve.ann import AnnConfig, build_index, exact_top_k, recall_at_k
from chexretrieve.geometry import fit_geometry

CHUNK = 65536


def clustered_rows(rng, centres: np.ndarray, count: int, spread: float) -> np.ndarray:
    picked = centres[rng.integers(0, len(centres), count)]
    rows = picked + spread * rng.standard_normal(picked.shape) / np.sqrt(centres.shape[1])
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def gallery_features(geometry, rng, centres, size: int) -> np.ndarray:
    out = np.empty((size, geometry.feature_dim), dtype=np.float32)
    for start in range(0, size, CHUNK):
        count = min(CHUNK, size - start)
        out[start : start + count] = geometry.features(clustered_rows(rng, centres, count, 0.7))
    return out


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def measure(index, queries: np.ndarray, keys: np.ndarray, truth, k: int) -> dict:
    latencies = []
    found = np.empty((len(queries), k), dtype=np.int64)
    for i, query in enumerate(queries):
        started = time.perf_counter()
        _, rows = index.search(query[None, :], k)
        latencies.append(time.perf_counter() - started)
        found[i] = rows[0]
    started = time.perf_counter()
    index.search(queries, k)
    batch_s = time.perf_counter() - started
    return {
        "p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "p95_ms": 1000 * float(np.percentile(latencies, 95)),
        "batch_ms": 1000 * batch_s / len(queries),
        "recall": recall_at_k(found, queries, keys, truth, k),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--geometry", default="softmax")
    parser.add_argument("--kinds", nargs="+", default=["exact", "hnsw", "ivf"])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--anchors", type=int, default=50)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="FAISS threads (0: all cores; 1 gives steady "
        "latencies on a machine other work shares, where OpenMP threads wait for each other)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    console = Console(width=150)
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((64, args.dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    anchors = clustered_rows(rng, centres, args.anchors, 0.8)
    options = {"seed": 0} if args.geometry in ("gmm", "movmf") else {}
    geometry = fit_geometry(args.geometry, anchors, inv_temperature=30.0, **options)
    query_features = geometry.features(clustered_rows(rng, centres, args.queries, 0.7))
    queries = np.ascontiguousarray(geometry.query_vectors(query_features), dtype=np.float32)
    console.print(
        f"geometry {args.geometry}: d = {args.dim}, N = {args.anchors}, feature width "
        f"{geometry.feature_dim}; {args.queries} unseen queries, k = {args.k}"
    )

    table = Table(title=f"FAISS gallery search ({args.geometry}, F = {geometry.feature_dim})")
    for column in ("G", "index", "effort", "build s", "tune s", "index MB", "p50 ms", "p95 ms",
                   "batch ms/q", "p95 vs exact", f"recall@{args.k}"):  # fmt: skip
        table.add_column(column, justify="right")
    for size in args.sizes:
        started = time.perf_counter()
        keys = gallery_features(geometry, np.random.default_rng(args.seed + size), centres, size)
        features_s = time.perf_counter() - started
        truth = exact_top_k(queries, keys, args.k)
        console.print(
            f"G = {size:,}: features {features_s:.1f} s, {keys.nbytes / 1e6:.0f} MB; "
            f"peak RSS so far {peak_rss_gb():.2f} GB"
        )
        exact_p95 = None
        for kind in args.kinds:
            config = AnnConfig(kind=kind, threads=args.threads, seed=args.seed)
            index = build_index(geometry, keys, config=config)
            result = measure(index, queries, keys, truth, args.k)
            if kind == "exact":
                exact_p95 = result["p95_ms"]
            ratio = f"{result['p95_ms'] / exact_p95:.2f}x" if exact_p95 else "-"
            table.add_row(
                f"{size:,}",
                kind,
                str(index.search_effort or "-"),
                f"{index.stats.build_s:.1f}",
                f"{index.stats.tune_s:.1f}",
                f"{index.memory_bytes() / 1e6:.0f}",
                f"{result['p50_ms']:.2f}",
                f"{result['p95_ms']:.2f}",
                f"{result['batch_ms']:.3f}",
                ratio,
                f"{result['recall']:.3f}",
            )
            console.print(f"  {kind}: done (peak RSS {peak_rss_gb():.2f} GB)")
            del index
        del keys
    console.print(table)


if __name__ == "__main__":
    main()
