"""First search under each geometry, without and with the start-up warm-up (issue 24, defect 10).

For each geometry: a fresh search service (empty feature cache) answers a first search of the
case lookup (scores, ranking, rank calibration) and then a later one; a second fresh service runs
``chexretrieve.search.warmup.warm_up`` first (what `serve` / `demo` start in the background), then
answers its first search. Prints seconds and the ratio of each first search to the later one
(a warm first search should be about 1x). Not a test: timings depend on the machine.

    .venv/bin/python benchmarks/bench_first_search.py --db sqlite:///data/demo/chexretrieve.sqlite
    .venv/bin/python benchmarks/bench_first_search.py --n 300     # builds a small phantom store
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _build_store(folder: Path, n: int, encoder_spec: str) -> str:
    from chexretrieve.encoders import load_encoder
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
    from chexretrieve.store import open_store

    archive = folder / "phantom"
    write_archive(archive, ArchiveConfig(n=n, seed=0, workers=1), PhantomConfig())
    url = f"sqlite:///{folder / 'store.sqlite'}"
    store = open_store(url)
    ingest_paths([archive], store, load_encoder(encoder_spec), IngestConfig(workers=0),
                 labels=read_label_csv(archive / "labels.csv"))  # fmt: skip
    store.close()
    return url


def _service(url: str, encoder: str, features: Path):
    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.search.config import SearchConfig

    search = SearchConfig(feature_cache_dir=features)
    return open_search_app(AppConfig(url, encoder, search=search)).service


def _one_search(service, finding: str, geometry: str, case_id: int, top_k: int) -> float:
    from chexretrieve.search.service import SearchRequest

    request = SearchRequest(finding=finding, geometry=geometry, case_id=case_id, top_k=top_k)
    started = time.perf_counter()
    service.gallery_scores(request)
    service.search(request)
    service.rank_calibration(request, top_k)
    return time.perf_counter() - started


def main() -> None:
    from chexretrieve.geometry import GEOMETRIES
    from chexretrieve.search.warmup import warm_up

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="an existing store (default: build one of --n phantoms)")
    parser.add_argument("--n", type=int, default=300, help="phantoms when building a store")
    parser.add_argument("--encoder", default="phantom")
    parser.add_argument("--finding", default="Pleural Effusion")
    parser.add_argument("--geometries", nargs="+", default=[g.name for g in GEOMETRIES])
    parser.add_argument("--top-k", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        url = args.db or _build_store(folder, args.n, args.encoder)
        print(f"store {url}; finding {args.finding}; top {args.top_k}")
        print(f"{'geometry':<30} {'cold 1st s':>10} {'later s':>8} {'warm-up s':>9} "
              f"{'warm 1st s':>10} {'cold/later':>10} {'warm/later':>10}")  # fmt: skip
        for geometry in args.geometries:
            cold = _service(url, args.encoder, folder / f"cold-{geometry}")
            ids = cold.gallery.image_ids
            first = _one_search(cold, args.finding, geometry, int(ids[1]), args.top_k)
            later = _one_search(cold, args.finding, geometry, int(ids[2]), args.top_k)
            warm = _service(url, args.encoder, folder / f"warm-{geometry}")
            started = time.perf_counter()
            warm_up(warm, args.finding, [geometry], args.top_k)
            spent = time.perf_counter() - started
            warm_first = _one_search(warm, args.finding, geometry, int(ids[1]), args.top_k)
            print(f"{geometry:<30} {first:>10.3f} {later:>8.3f} {spent:>9.3f} {warm_first:>10.3f} "
                  f"{first / later:>9.1f}x {warm_first / later:>9.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
