"""What one UI search costs beyond the search API: one ranking, its percentiles and thumbnails.

A click in the case-lookup UI runs ``CaseLookup.search``: the search service's scores over the
gallery (the percentile of each result among the candidates), the search under the chosen geometry
and, for each of its 12 results, an 8-bit thumbnail read from the archived file (cached in memory
afterwards). This script times, on a synthetic gallery whose archived files are real DICOM
radiographs written here:

- the bare ``SearchService.search`` call (the floor),
- a UI search whose 12 thumbnails are read from the DICOM files, rendered and persisted (first
  sight of those cases; the files themselves are in the OS page cache, as they were just written),
- the same UI search with only the persisted PNG thumbnails (as after a server restart),
- the same UI search again (thumbnails in memory),

and prints the ratios of the UI search to the floor, measured in one run.

    .venv/bin/python benchmarks/ui_search.py                     # 20k gallery, 1024 px DICOMs
    .venv/bin/python benchmarks/ui_search.py --size 2048 --repeats 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.findings import FINDINGS
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.gallery import Gallery
from chexretrieve.search.service import AnchorSetRef, SearchService
from chexretrieve.ui.handlers import CaseLookup, SearchSettings


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class SyntheticAnchors:
    def __init__(self, dim: int, rng: np.random.Generator):
        self.anchors = unit(rng.standard_normal((50, dim)))

    def anchor_set(self, finding, key):
        return AnchorSetRef("synthetic@1", "h1", tuple(f"s{i}" for i in range(50)), self.anchors)

    def broad_prior(self):
        raise ValueError("no prior in this benchmark")


def write_files(folder: Path, count: int, size: int) -> list[str]:
    from chexretrieve.dicom.write import derive_uid, write_radiograph

    y, x = np.mgrid[0:size, 0:size] / size
    paths = []
    for i in range(count):
        image = 0.5 + 0.3 * np.sin(6 * x + i) * np.cos(5 * y - i)
        values = np.clip(image * 4095, 0, 4095).astype(np.uint16)
        path = folder / f"case{i}.dcm"
        write_radiograph(
            path,
            values,
            {
                "PatientID": f"P{i}",
                "StudyInstanceUID": derive_uid("bench", i, 1),
                "SeriesInstanceUID": derive_uid("bench", i, 2),
                "SOPInstanceUID": derive_uid("bench", i, 3),
                "Modality": "CR",
            },
        )
        paths.append(str(path))
    return paths


def build_gallery(n: int, dim: int, paths: list[str], rng) -> Gallery:
    ids = np.arange(1, n + 1, dtype=np.int64)
    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.{i}" for i in ids],
            "view_position": "PA",
            "patient_sex": "F",
            "patient_age_years": 50.0,
            "study_date": dt.date(2020, 1, 1),
            "split": "train",
            "source_path": [paths[i % len(paths)] for i in range(n)],
            "pixel_sha256": [f"{i:064x}" for i in ids],
        },
        index=ids,
    )
    labels = pd.DataFrame(np.nan, index=ids, columns=list(FINDINGS))
    return Gallery("bench:1", ids, unit(rng.standard_normal((n, dim))), meta, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gallery", type=int, default=20_000, help="archived images")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--size", type=int, default=1024, help="side of the DICOM files in px")
    parser.add_argument("--repeats", type=int, default=5, help="queries timed (fresh cases each)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        # one file per result slot of every timed query: cold searches really read from disk
        paths = write_files(folder, 12 * (args.repeats + 1), args.size)
        print(f"wrote {len(paths)} DICOM files of {args.size} px in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        gallery = build_gallery(args.gallery, args.dim, paths, rng)
        service = SearchService(
            lambda: gallery,
            SyntheticAnchors(args.dim, rng),
            config=SearchConfig(feature_cache_dir=folder / "features"),
        )
        lookup = CaseLookup(service, thumbnail_px=256, thumbnail_dir=folder / "thumbnails")
        settings = SearchSettings("Pleural Effusion", "softmax", top_k=12)
        warmup = lookup.load_case(1)
        lookup.search(warmup, settings)  # features computed and cached once
        floor, cold, disk, warm = [], [], [], []
        for r in range(args.repeats):
            query = lookup.load_case(2 + r)
            lookup._thumbs.clear()
            t0 = time.perf_counter()
            service.search(lookup._request(query, settings, "softmax"))
            t1 = time.perf_counter()
            lookup.search(query, settings)  # read, render and persist the thumbnails
            t2 = time.perf_counter()
            lookup._thumbs.clear()  # as after a restart: only the disk cache is left
            lookup.search(query, settings)
            t3 = time.perf_counter()
            lookup.search(query, settings)
            t4 = time.perf_counter()
            floor.append(t1 - t0)
            cold.append(t2 - t1)
            disk.append(t3 - t2)
            warm.append(t4 - t3)
    f, c, d, w = (statistics.median(v) * 1000 for v in (floor, cold, disk, warm))
    print(f"gallery {args.gallery:,} x {args.dim}, {args.size} px DICOM, median of {args.repeats}")
    print(f"bare search                    {f:8.1f} ms")
    print(f"UI search, thumbnails read     {c:8.1f} ms   ({c / f:5.1f} x the bare search)")
    print(f"UI search, thumbnails on disk  {d:8.1f} ms   ({d / f:5.1f} x the bare search)")
    print(f"UI search, thumbnails in memory{w:8.1f} ms   ({w / f:5.1f} x the bare search)")


if __name__ == "__main__":
    main()
