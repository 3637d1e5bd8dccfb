"""Latency of the search API (SearchService.search) per geometry on synthetic galleries.

Prints p50 / p95 per geometry and gallery size, with features already cached (the steady state of
a running server: the first search of a (geometry, anchor set) pays feature caching once, shown
separately). Goals (issue 16): p95 <= 50 ms at 100k and <= 250 ms at 1M for every geometry, exact;
HNSW <= 20 ms at 1M through the service.

    .venv/bin/python benchmarks/search_latency.py                 # 10k and 100k, d = 512
    .venv/bin/python benchmarks/search_latency.py --sizes 10000 --repeats 20
    .venv/bin/python benchmarks/search_latency.py --index hnsw    # ranked through a FAISS index
    .venv/bin/python benchmarks/search_latency.py --storage float32 float16   # both, one run
    nice .venv/bin/python benchmarks/search_latency.py --sizes 1000000 --rounds 3 --repeats 10
    .venv/bin/python benchmarks/search_latency.py --data clustered --inv-temperature 30

With ``--index`` the service ranks through that ``chexretrieve.ann`` index
(SearchConfig.index_kind; its background build, awaited here, is part of "first"), and each row
also prints the overlap of its top 10 with the exact ranking's on the first storage dtype (mean
over the timed unfiltered searches). With several ``--storage`` dtypes
(SearchConfig.storage_dtype) every dtype is timed on the same queries, each row prints its p95
relative to the first dtype's, and the top-10 overlap with the first dtype's ranking (mean over
the timed unfiltered searches). With ``--rounds R`` every geometry is timed in R consecutive
rounds and p50 / p95 are the medians of the per-round figures (a scheduler stall on the shared
machine then moves one round, not the result). With several ``--scan-threads`` values
(SearchConfig.scan_threads) each storage dtype is timed with each, on one set of cached features.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.findings import FINDINGS
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.features import GEOMETRY_CHOICES
from chexretrieve.search.gallery import Gallery, SearchFilters, with_embeddings
from chexretrieve.search.scoring import KeyMatrix
from chexretrieve.search.service import AnchorSetRef, SearchRequest, SearchService


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered_rows(rng: np.random.Generator, centres: np.ndarray, n: int, spread: float):
    """Unit rows scattered around ``centres`` (benchmarks/ann.py's model of one encoder's
    embeddings crowding into a few regions), float32, made in chunks (bounded temporaries)."""
    out = np.empty((n, centres.shape[1]), dtype=np.float32)
    for start in range(0, n, 65536):
        count = min(65536, n - start)
        picked = centres[rng.integers(0, len(centres), count)]
        rows = picked + spread * rng.standard_normal(picked.shape) / np.sqrt(centres.shape[1])
        out[start : start + count] = unit(rows)
    return out


class SyntheticAnchors:
    def __init__(self, dim: int, n_anchors: int, rng: np.random.Generator, centres=None):
        if centres is None:
            self.anchors = unit(rng.standard_normal((n_anchors, dim)))
            self.prior = unit(rng.standard_normal((2000, dim)))
        else:  # anchors and the broad corpus around the gallery's centres (as ann.py)
            self.anchors = clustered_rows(rng, centres, n_anchors, 0.8)
            self.prior = clustered_rows(rng, centres, 2000, 0.8)

    def anchor_set(self, finding, key):
        n = len(self.anchors)
        return AnchorSetRef("synthetic@1", "h1", tuple(f"s{i}" for i in range(n)), self.anchors)

    def broad_prior(self):
        return "prior", self.prior


class Temperature:
    """Stands in for the encoder: queries are archived cases, only inv_t is read."""

    def __init__(self, inv_temperature: float):
        self.inv_temperature = inv_temperature


def synthetic_gallery(n: int, dim: int, rng: np.random.Generator, centres=None) -> Gallery:
    """Random unit embeddings (``centres`` None) or rows clustered around ``centres``."""
    ids = np.arange(1, n + 1, dtype=np.int64)
    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.{i}" for i in ids],
            "view_position": rng.choice(["PA", "AP"], n),
            "patient_sex": rng.choice(["M", "F"], n),
            "patient_age_years": rng.integers(18, 95, n).astype(float),
            "study_date": [dt.date(2015, 1, 1) + dt.timedelta(days=int(d)) for d in ids % 3000],
            "split": "train",
        },
        index=ids,
    )
    labels = pd.DataFrame(
        rng.choice([1.0, 0.0, np.nan], size=(n, len(FINDINGS))), columns=list(FINDINGS), index=ids
    )
    if centres is None:
        embeddings = unit(rng.standard_normal((n, dim)))
    else:
        embeddings = clustered_rows(rng, centres, n, 0.7)
    return Gallery("synthetic:1", ids, embeddings, meta, labels)


def stored_galleries(gallery: Gallery, storages) -> dict[str, Gallery]:
    """The gallery held once per storage dtype (services of one dtype share its rows, as a
    server's do); the float32 rows it was built from are dropped by the caller."""
    return {
        dtype: with_embeddings(gallery, KeyMatrix.from_rows(gallery.embeddings, dtype).array)
        for dtype in storages
    }


def percentiles(rounds: list[list[float]]) -> tuple[float, float]:
    """(p50, p95) in ms: the median over rounds of each round's percentile."""
    per_round = np.array([np.percentile(np.array(r) * 1000, [50, 95]) for r in rounds])
    return float(np.median(per_round[:, 0])), float(np.median(per_round[:, 1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--anchors", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=30, help="searches per cell and round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over every geometry")
    parser.add_argument("--geometries", nargs="+", default=list(GEOMETRY_CHOICES))
    parser.add_argument("--index", default="none", help="none, exact, hnsw or ivf")
    parser.add_argument("--storage", nargs="+", default=["float32"], help="float32, float16")
    parser.add_argument(
        "--scan-threads", type=int, nargs="+", default=[0], help="SearchConfig.scan_threads"
    )
    parser.add_argument(
        "--data",
        default="random",
        choices=["random", "clustered"],
        help="random unit vectors, or rows around 64 centres with anchors near them (ann.py)",
    )
    parser.add_argument("--inv-temperature", type=float, default=100.0)
    args = parser.parse_args()
    variants = [(s, t) for s in args.storage for t in args.scan_threads]
    labels = [s if len(args.scan_threads) == 1 else f"{s}/t{t}" for s, t in variants]
    rng = np.random.default_rng(0)
    centres = None
    if args.data == "clustered":
        centres = unit(rng.standard_normal((64, args.dim))).astype(np.float64)
    anchors = SyntheticAnchors(args.dim, args.anchors, rng, centres)
    encoder = Temperature(args.inv_temperature)
    filters = SearchFilters(views=("PA",), age_min=30)
    print(
        f"{args.data} data, d = {args.dim}, {args.anchors} anchors, inv_t "
        f"{args.inv_temperature:g}, {args.rounds} round(s) of {args.repeats} "
        "searches per cell, top-10; p50/p95: median over rounds"
    )
    print("load average at start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    header = f"{'gallery':>8} {'geometry':<28} {'storage':<11} {'first (s)':>9} {'p50 ms':>8}"
    header += f" {'p95 ms':>8} filtered p95 p95/{labels[0]}"
    compare = args.index != "none" or len(variants) > 1
    print(header + ("  top-10 overlap" if compare else ""), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            gallery = synthetic_gallery(size, args.dim, rng, centres)
            stored = stored_galleries(gallery, args.storage)
            del gallery
            folder = Path(tmp) / str(size)

            def config(storage, index, threads=0, folder: Path = folder) -> SearchConfig:
                # features of the geometry being timed stay in memory, earlier ones are dropped
                # (every geometry's features at 1M would not fit in memory together)
                return SearchConfig(
                    feature_cache_dir=folder,
                    index_kind=index,
                    index_min_gallery=0,
                    storage_dtype=storage,
                    memory_cache_entries=1,
                    scan_threads=threads,
                )

            services, caches = {}, {}
            for label, (storage, threads) in zip(labels, variants, strict=True):
                service = SearchService(
                    lambda g=stored[storage]: g,
                    anchors,
                    encoder,
                    config=config(storage, args.index, threads),
                )
                service.cache = caches.setdefault(storage, service.cache)  # features held once
                services[label] = service
            reference = services[labels[0]]
            if args.index != "none":  # the exact ranking of the first dtype, on its features
                reference = SearchService(
                    lambda g=stored[args.storage[0]]: g,
                    anchors,
                    encoder,
                    config=config(args.storage[0], "none"),
                )
                reference.cache = caches[args.storage[0]]
            for geometry in args.geometries:
                first = {}
                for storage, service in services.items():
                    t0 = time.perf_counter()
                    service.search(SearchRequest(finding="Edema", geometry=geometry, case_id=1))
                    service.cache.wait_for_indexes()  # the index builds in the background
                    first[storage] = time.perf_counter() - t0
                plain = {s: [[] for _ in range(args.rounds)] for s in services}
                filtered = {s: [[] for _ in range(args.rounds)] for s in services}
                overlap = {s: [] for s in services}
                for round_ in range(args.rounds):
                    for _ in range(args.repeats):
                        case = int(rng.integers(1, size + 1))
                        truth = None
                        if compare:
                            request = SearchRequest(
                                finding="Edema", geometry=geometry, case_id=case
                            )
                            truth = {h.image_id for h in reference.search(request).hits}
                        for storage, service in services.items():
                            for out, flt in ((plain, SearchFilters()), (filtered, filters)):
                                request = SearchRequest(
                                    finding="Edema", geometry=geometry, case_id=case, filters=flt
                                )
                                t0 = time.perf_counter()
                                hits = service.search(request).hits
                                out[storage][round_].append(time.perf_counter() - t0)
                                if truth is not None and out is plain:
                                    found = {h.image_id for h in hits}
                                    overlap[storage].append(len(truth & found) / len(truth))
                base95 = percentiles(plain[labels[0]])[1]
                for storage in services:
                    p50, p95 = percentiles(plain[storage])
                    fp95 = percentiles(filtered[storage])[1]
                    extra = f"  {np.mean(overlap[storage]):.3f}" if overlap[storage] else ""
                    print(
                        f"{size:>8} {geometry:<28} {storage:<11} {first[storage]:>9.2f} "
                        f"{p50:>8.1f} {p95:>8.1f} {fp95:>12.1f} {p95 / base95:>11.2f}" + extra,
                        flush=True,
                    )
                for path in folder.glob("*.npy"):  # disk: at 1M every geometry's files add up
                    path.unlink()
            del services, caches, reference, stored
    print("load average at end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
