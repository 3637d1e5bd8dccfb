"""What one BLAS thread for a query's own features changes in search latency (A/B, one process).

The search service computes each query's features inside ``one_blas_thread`` (so OpenBLAS's helper
thread does not spin on the core the split gallery scan needs). This benchmark swaps that limit for
a no-op and back, round after round in the same process over the same cached features, so the
difference is not lost in the variation between processes (~30% for the same code here):

    .venv/bin/python benchmarks/blas_limit.py --size 100000 --geometries gmm_posterior movmf gmm

Synthetic gallery and anchors of ``search_latency.py`` (random 512-d unit vectors, 50 anchors,
inv_t 100), float16 storage, the default scan threads; prints the median over rounds of each
round's p50 / p95.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from search_latency import SyntheticAnchors, Temperature, stored_galleries, synthetic_gallery

import chexretrieve.search.service as service_module
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest, SearchService


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--geometries", nargs="+", default=["gmm_posterior", "movmf", "gmm"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=15, help="searches per variant and round")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    anchors = SyntheticAnchors(512, 50, rng, None)
    stored = stored_galleries(synthetic_gallery(args.size, 512, rng), ["float16"])["float16"]
    shipped = service_module.one_blas_thread
    variants = {"one BLAS thread": shipped, "no limit": contextlib.nullcontext}
    print("load average at start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        config = SearchConfig(
            feature_cache_dir=Path(tmp),
            index_kind="none",
            storage_dtype="float16",
            memory_cache_entries=1,
        )
        service = SearchService(lambda: stored, anchors, Temperature(100.0), config=config)
        try:
            for geometry in args.geometries:
                service.search(SearchRequest(finding="Edema", geometry=geometry, case_id=1))
                times = {name: [] for name in variants}
                for _ in range(args.rounds):
                    for name, limit in variants.items():
                        service_module.one_blas_thread = limit
                        round_ = []
                        for _ in range(args.repeats):
                            case = int(rng.integers(1, args.size + 1))
                            request = SearchRequest(
                                finding="Edema", geometry=geometry, case_id=case
                            )
                            start = time.perf_counter()
                            service.search(request)
                            round_.append(time.perf_counter() - start)
                        times[name].append(np.percentile(round_, [50, 95]) * 1000)
                for name, rounds in times.items():
                    p50, p95 = np.median(np.array(rounds), axis=0)
                    print(
                        f"{args.size:>8} {geometry:<16} {name:<16} p50 {p50:7.1f}  p95 {p95:7.1f}"
                    )
        finally:
            service_module.one_blas_thread = shipped
    print("load average at end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
