"""The archive density's cost: EM fit time on a large archive and the per-query evaluation.

Synthetic archive: ``--n`` unit vectors in ``--dim`` dimensions around ``--clusters`` random
directions (Gaussian noise of ``--spread`` per coordinate around each, normalised; float32 like
the store's embeddings). Measures, on this machine:

- one fit per K in ``--k``: the spherical k-means++ start, then EM to tolerance 1e-6 (at most
  ``--max-iter`` iterations; the count and whether it converged are printed), and the cost of
  one EM iteration (5 iterations at tolerance 0, averaged);
- the search-time cost of one query: log-density + posterior (the OOD flag and the concept
  decomposition) for a mixture of each K, one query at a time as the search service calls it,
  and the ratio to the 1 ms goal;
- optionally (``--select``) the full held-out selection over the candidates of DensityConfig.

    .venv/bin/python benchmarks/bench_density.py                 # 100k x 512, K = 16, 64
    .venv/bin/python benchmarks/bench_density.py --n 20000 --select
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_info

from chexretrieve.density.config import DensityConfig
from chexretrieve.geometry.movmf_density import (
    MovMFDensity,
    fit_movmf_density,
    select_movmf_density,
    spherical_kmeans_labels,
)

GOAL_SECONDS_PER_QUERY = 1e-3


def synthetic_archive(n: int, dim: int, clusters: int, spread: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rows = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


def per_query_seconds(density: MovMFDensity, queries: np.ndarray) -> float:
    for row in queries[:20]:  # warm-up
        density.log_density(row[None, :])
    started = time.perf_counter()
    for row in queries:
        density.log_density_and_posterior(row[None, :])
    return (time.perf_counter() - started) / len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--clusters", type=int, default=40)
    parser.add_argument("--spread", type=float, default=0.06)
    parser.add_argument("--k", default="16,64")
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--select", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    threads = sum(i.get("num_threads", 0) for i in threadpool_info() if i["user_api"] == "blas")
    started = time.perf_counter()
    archive = synthetic_archive(args.n, args.dim, args.clusters, args.spread, args.seed)
    print(
        f"archive {args.n:,} x {args.dim} float32 ({args.clusters} clusters) made in "
        f"{time.perf_counter() - started:.1f} s; BLAS threads {threads}"
    )
    queries = synthetic_archive(args.queries, args.dim, args.clusters, args.spread, args.seed + 1)
    for k in [int(v) for v in args.k.split(",")]:
        started = time.perf_counter()
        labels = spherical_kmeans_labels(archive, k, args.seed)
        init = time.perf_counter() - started
        started = time.perf_counter()
        density = fit_movmf_density(
            archive, k, seed=args.seed, max_iter=args.max_iter, initial_labels=labels
        )
        em = time.perf_counter() - started
        iterations = len(density.history)
        started = time.perf_counter()
        fixed = fit_movmf_density(archive, k, tol=0.0, max_iter=5, initial_labels=labels)
        per_iteration = (time.perf_counter() - started) / len(fixed.history)
        cost = per_query_seconds(density, queries)
        print(
            f"K={k:3d}: fit {init + em:6.1f} s = k-means++ start {init:5.1f} s + EM {em:5.1f} s "
            f"({iterations} iterations to tol 1e-6, converged={density.converged}); one EM "
            f"iteration {per_iteration:.2f} s; per query (log-density + posterior) "
            f"{cost * 1e6:6.1f} us = {cost / GOAL_SECONDS_PER_QUERY:.3f} x the 1 ms goal"
        )
    if args.select:
        candidates = DensityConfig().candidates
        started = time.perf_counter()
        selection = select_movmf_density(archive, candidates=candidates, seed=args.seed)
        print(
            f"held-out selection over K in {candidates}: chose K="
            f"{selection.density.n_components} in {time.perf_counter() - started:.1f} s"
        )


if __name__ == "__main__":
    main()
