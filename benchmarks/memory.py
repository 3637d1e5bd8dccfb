"""Resident memory of a running search service, component by component (issue 16).

Builds a SearchService over a synthetic gallery (d = 512, 50 anchors; benchmarks/search_latency.py's
generator), then measures the process's resident set (VmRSS) after each step: the Python / numpy /
pandas / torch / FAISS baseline, the loaded gallery (embeddings in SearchConfig.storage_dtype plus
ids, metadata and labels), the cached features of each geometry, and optionally an ANN index. Each
line prints the RSS growth of that step and the bytes of the arrays it added. Goal: a service with a
1M gallery and three geometries cached holds <= 2 GB beyond the baseline.

    .venv/bin/python benchmarks/memory.py --size 100000 --storage float16
    nice .venv/bin/python benchmarks/memory.py --size 1000000 --storage float16 float32

Each storage dtype runs in a fresh child process (one at a time), so the figures do not mix.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set of this process in MB, from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def measure(size: int, storage: str, geometries: list[str], index: str) -> None:
    import faiss  # noqa: F401
    import numpy as np
    import torch  # noqa: F401 - part of the baseline a running service has loaded

    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.service import SearchRequest, SearchService

    sys.path.insert(0, str(Path(__file__).parent))
    from search_latency import SyntheticAnchors, synthetic_gallery

    rng = np.random.default_rng(0)
    anchors = SyntheticAnchors(512, 50, rng)
    baseline, _ = rss_mb()
    print(f"{size:>9} {storage:<8} {'baseline (python, numpy, torch, faiss)':<40} {baseline:>9.0f}")
    with tempfile.TemporaryDirectory() as tmp:
        config = SearchConfig(
            feature_cache_dir=Path(tmp),
            storage_dtype=storage,
            index_kind=index,
            index_min_gallery=0,
        )
        # the loader keeps no reference: the float32 rows it built are freed once stored
        service = SearchService(lambda: synthetic_gallery(size, 512, rng), anchors, config=config)
        before = baseline
        t0 = time.perf_counter()
        gallery = service.gallery
        now, _ = rss_mb()
        arrays = gallery.embeddings.nbytes / 2**20
        label = f"gallery ({time.perf_counter() - t0:.0f} s)"
        print(f"{size:>9} {storage:<8} {label:<40} {now - before:>9.0f} {arrays:>10.0f}")
        before = now
        for geometry in geometries:
            t0 = time.perf_counter()
            service.search(SearchRequest(finding="Edema", geometry=geometry, case_id=1))
            service.cache.wait_for_indexes()
            now, _ = rss_mb()
            blocks = [v for k, v in service.cache._memory.items()]
            held = blocks[-1].nbytes / 2**20 if blocks else 0.0
            if geometry in ("cosine", "iti"):
                held = 0.0  # the gallery's own rows
            label = f"features: {geometry} ({time.perf_counter() - t0:.0f} s)"
            print(f"{size:>9} {storage:<8} {label:<40} {now - before:>9.0f} {held:>10.0f}")
            before = now
        now, peak = rss_mb()
        print(f"{size:>9} {storage:<8} {'total beyond baseline':<40} {now - baseline:>9.0f}")
        print(f"{size:>9} {storage:<8} {'peak RSS of the process':<40} {peak:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--storage", nargs="+", default=["float32", "float16"])
    parser.add_argument("--geometries", nargs="+", default=["cosine", "softmax", "gaussian"])
    parser.add_argument("--index", default="none", help="none, exact, hnsw or ivf")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(args.size, args.storage[0], args.geometries, args.index)
        return
    print("load average at start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print(f"{'gallery':>9} {'storage':<8} {'step':<40} {'RSS +MB':>9} {'arrays MB':>10}")
    for storage in args.storage:
        command = [sys.executable, __file__, "--child", "--size", str(args.size)]
        command += ["--storage", storage, "--index", args.index, "--geometries", *args.geometries]
        subprocess.run(command, check=True)
    print("load average at end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
