"""Top-k search speed of every anchor geometry over cached features, as a ratio to cosine.

A gallery of G random unit vectors and N random unit anchors per anchor count. For each geometry:
fit, cache the gallery's features (timed, with tracemalloc's peak: the features themselves plus
temporaries), then answer Q queries in batches: one matrix product (batch × G) of query vectors
against the cached key vectors, and argpartition for the top k. The search time per query is
divided by cosine's, measured in the same run on the same gallery: the geometries are timed in
turn for --repeats rounds, and the ratio is the median over rounds of each round's time over
cosine's time in that round (ms/query is the best round).

    .venv/bin/python benchmarks/geometry_search.py                      # 200k x 512, float32
    .venv/bin/python benchmarks/geometry_search.py --gallery 50000 --anchors 16 256
    .venv/bin/python benchmarks/geometry_search.py --threads 1 --clock cpu  # on a busy machine

On a machine other work shares, wall-clock ratios swing by 2x between passes; one BLAS thread and
this process's CPU time (--threads 1 --clock cpu) measure the work itself and give steady ratios.

Goals: softmax (N <= 256) <= 1.0x cosine; gaussian and latent models <= 1.1x; gmm, movmf <= 2.2x.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np
from rich.console import Console
from rich.table import Table

from chexretrieve.geometry import GEOMETRY_KINDS, fit_geometry

GOALS = {
    "cosine": 1.0,
    "iti": 1.1,
    "softmax": 1.0,
    "gaussian": 1.1,
    "latent_gaussian": 1.1,
    "latent_spherical": 1.1,
    "gmm": 2.2,
    "movmf": 2.2,
}


def unit_rows(rng: np.random.Generator, count: int, dim: int, dtype) -> np.ndarray:
    out = np.empty((count, dim), dtype=dtype)
    for start in range(0, count, 65536):
        block = rng.standard_normal((min(65536, count - start), dim))
        out[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def search(geom, query_features: np.ndarray, keys: np.ndarray, top: int, batch: int):
    """Top-``top`` key indices per query (best first), one matrix product per batch of queries."""
    found = np.empty((len(query_features), top), dtype=np.int64)
    kth = keys.shape[0] - top
    for start in range(0, len(query_features), batch):
        vectors = geom.query_vectors(query_features[start : start + batch])
        block = vectors @ keys.T
        best = np.argpartition(block, kth, axis=1)[:, kth:]
        order = np.argsort(-np.take_along_axis(block, best, axis=1), axis=1)
        found[start : start + batch] = np.take_along_axis(best, order, axis=1)
    return found


def prepare(kind, anchors, gallery, queries, args) -> dict:
    """Fit, cache the gallery's features (timed, tracemalloc peak) and the queries' features."""
    options = {}
    if kind in ("gmm", "movmf"):
        options = {"n_components": args.components, "seed": args.seed}
    start = args.timer()
    geom = fit_geometry(kind, anchors, inv_temperature=args.inv_temperature, **options)
    fit_s = args.timer() - start
    tracemalloc.start()
    start = args.timer()
    keys = geom.features(gallery)
    cache_s = args.timer() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "kind": kind,
        "geom": geom,
        "keys": keys,
        "query_features": geom.features(queries),
        "width": geom.feature_dim,
        "fit_s": fit_s,
        "cache_s": cache_s,
        "peak_mb": peak / 2**20,
    }


def time_round_robin(rows: list[dict], args) -> None:
    """Search with every geometry in turn for ``repeats`` rounds.

    Each geometry keeps its best pass (ms/query) and the median over rounds of its time divided by
    cosine's in the same round: interleaving and pairing spread background load over all of them.
    """
    passes = np.empty((args.repeats, len(rows)))
    for round_index in range(args.repeats):
        for column, row in enumerate(rows):
            start = args.timer()
            search(row["geom"], row["query_features"], row["keys"], args.top, args.batch)
            passes[round_index, column] = (args.timer() - start) / len(row["query_features"])
    ratios = np.median(passes / passes[:, :1], axis=0)
    for column, row in enumerate(rows):
        row["per_query_ms"] = passes[:, column].min() * 1e3
        row["ratio"] = float(ratios[column])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gallery", type=int, default=200_000, help="gallery size G")
    parser.add_argument("--dim", type=int, default=512, help="embedding dimension d")
    parser.add_argument(
        "--anchors", type=int, nargs="+", default=[16, 64, 256, 1024], help="anchor counts N"
    )
    parser.add_argument("--queries", type=int, default=500, help="queries searched per geometry")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--batch", type=int, default=250, help="queries per matrix product")
    parser.add_argument("--top", type=int, default=10, help="neighbours returned per query")
    parser.add_argument("--repeats", type=int, default=3, help="search rounds over all geometries")
    parser.add_argument("--components", type=int, default=4, help="gmm / movmf components")
    parser.add_argument("--inv-temperature", type=float, default=100.0)
    parser.add_argument("--kinds", nargs="+", default=list(GEOMETRY_KINDS), choices=GEOMETRY_KINDS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="BLAS threads (default: the library's own)"
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall time, or this process's CPU time (steadier when other work shares the cores; "
        "use it with --threads 1)",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=args.threads, user_api="blas"):
            run(args)
    else:
        run(args)


def run(args: argparse.Namespace) -> None:
    args.timer = time.process_time if args.clock == "cpu" else time.perf_counter

    console = Console(width=110)
    rng = np.random.default_rng(args.seed)
    dtype = np.dtype(args.dtype)
    gallery = unit_rows(rng, args.gallery, args.dim, dtype)
    queries = unit_rows(rng, args.queries, args.dim, dtype)
    console.print(
        f"gallery {args.gallery} x {args.dim} {args.dtype} ({gallery.nbytes / 2**20:.0f} MiB), "
        f"{args.queries} queries, top-{args.top}, batches of {args.batch}, "
        f"best of {args.repeats}; {os.cpu_count()} CPU cores, BLAS threads "
        f"{args.threads or 'default'}, {args.clock} clock"
    )
    for count in args.anchors:
        anchors = unit_rows(rng, count, args.dim, np.float64)
        kinds = ["cosine"] + [kind for kind in args.kinds if kind != "cosine"]
        rows = [prepare(kind, anchors, gallery, queries, args) for kind in kinds]
        time_round_robin(rows, args)
        table = Table(title=f"N = {count} anchors")
        for column in (
            "geometry",
            "width",
            "ms/query",
            "x cosine",
            "goal",
            "fit s",
            "cache s",
            "cache peak MiB",
        ):
            table.add_column(column, justify="left" if column == "geometry" else "right")
        for row in rows:
            ratio = row["ratio"]
            goal = GOALS[row["kind"]]
            applies = not (row["kind"] == "softmax" and count > 256)
            verdict = f"<= {goal:.1f}" if applies else "-"
            style = "red" if applies and ratio > goal else None
            table.add_row(
                row["kind"],
                str(row["width"]),
                f"{row['per_query_ms']:.3f}",
                f"{ratio:.2f}",
                verdict,
                f"{row['fit_s']:.2f}",
                f"{row['cache_s']:.2f}",
                f"{row['peak_mb']:.0f}",
                style=style,
            )
        console.print(table)
        rows.clear()


if __name__ == "__main__":
    main()
