"""Table 4 of the paper: retrieval time vs number of anchors, softmax vs parametric geometries.

One timed run = fit the geometry to N random unit anchors + features of G gallery and Q query
embeddings + scores of all Q x G pairs + the top-10 neighbours of each query (numpy on the CPU;
torch matmul + topk on CUDA when a GPU is visible). Printed in one run: seconds per (geometry, N)
and the ratios softmax / gaussian and softmax / cosine at each N.

    .venv/bin/python benchmarks/eval_runtime.py                       # Q=1000, G=10000, d=512
    .venv/bin/python benchmarks/eval_runtime.py --queries 10000 --gallery 50000   # the paper's size
"""

from __future__ import annotations

import argparse

from chexretrieve.evaluation.config import RuntimeConfig
from chexretrieve.evaluation.runtime import runtime_table, time_retrieval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--gallery", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--anchors", default="10,100,1000,10000")
    parser.add_argument("--geometries", default="cosine,softmax,gaussian,latent_gaussian")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    config = RuntimeConfig(
        n_queries=args.queries,
        n_gallery=args.gallery,
        dim=args.dim,
        anchor_counts=tuple(int(n) for n in args.anchors.split(",")),
        geometries=tuple(args.geometries.split(",")),
        repeats=args.repeats,
        warmup=args.warmup,
        device=args.device,
    )
    frame = time_retrieval(config, show_progress=False)
    table = runtime_table(frame)
    device = frame["device"].iloc[0]
    print(
        f"seconds (fit + features + top-10), {args.queries} queries x {args.gallery} gallery, ",
        end="",
    )
    print(f"d = {args.dim}, {device}, mean of {args.repeats} after {args.warmup} warm-up")
    print(table.to_string(float_format=lambda v: f"{v:8.3f}"))
    if {"softmax", "gaussian", "cosine"} <= set(table.columns):
        print("\nN       softmax/gaussian   softmax/cosine")
        for n, row in table.iterrows():
            ratio_g = row["softmax"] / row["gaussian"]
            ratio_c = row["softmax"] / row["cosine"]
            print(f"{n:<7d} {ratio_g:>15.2f} {ratio_c:>16.2f}")


if __name__ == "__main__":
    main()
