"""Ingest speed: decode-only, encoder-only and end-to-end rates, and how well they overlap.

    .venv/bin/python benchmarks/ingest.py [--n 48] [--encoder phantom|chexzero-random|SPEC]
        [--syntax native|rle|jpeg-lossless|jpeg2000|jpeg-baseline|jpeg-file | --archive DIR]
        [--workers -1] [--batch-size 16] [--thumbnail-px 256] [--reduced-decode] [--device auto]
        [--json FILE]

Images: N copies of RG1 from pydicom-data (a real 1955 x 1841 PA chest CR), 15-bit, written in
``--syntax`` (one pixel changed per copy so each is a distinct image), or the first N files of an
``--archive`` folder (the phantom demo archive: 320 x 320, 12-bit RLE). Figures of one run:

- decode rate per worker: the ingest reader (``chexretrieve.ingest.prepare.ingest_reader``: one
  decode at working resolution, thumbnail, the encoder's preprocessing) in this process with one
  torch thread, as a decoding worker runs it (images/s); with its CPU ms per image;
- decode rate of the pool: the decode pool with W workers, model inputs delivered to this process;
- encoder-only rate: the encoder stage alone on the already-preprocessed inputs (images/s);
- end-to-end rate: ``ingest_paths`` into a fresh SQLite store (decode, embed, write), steady state
  from the first committed batch to the last, and the whole run with start-up;
- ratio = end to end / min(decode rate per worker x W, encoder-only rate): the issue's measure of
  how close the pipeline runs to its slower stage. Goal >= 0.9.

``--encoder chexzero-random`` builds a CheXzero-sized (ViT-B/32) CLIP with random weights. Any spec
of ``chexretrieve ingest --encoder`` works too (``stand-in:50`` costs 50 ms of wall time per image,
like a remote call). The same command runs on a CUDA machine (benchmarks/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("CHEXRETRIEVE_TEST_ENCODERS", "1")  # the stand-in is a benchmark encoder
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from chexretrieve.dicom import ReadConfig, read_radiograph  # noqa: E402
from chexretrieve.dicom.read import pydicom_test_file  # noqa: E402
from chexretrieve.dicom.samples import SAMPLE_SYNTAXES, write_jpeg_file, write_sample  # noqa: E402
from chexretrieve.dicom.write import derive_uid  # noqa: E402
from chexretrieve.encoders.base import split_preprocessing  # noqa: E402
from chexretrieve.encoders.registry import load_encoder  # noqa: E402
from chexretrieve.ingest import IngestConfig, ingest_paths  # noqa: E402
from chexretrieve.ingest.decode_pool import Decoded, DecodePool, decode_one  # noqa: E402
from chexretrieve.ingest.prepare import ingest_reader  # noqa: E402
from chexretrieve.store import open_store  # noqa: E402

SYNTAXES = (*SAMPLE_SYNTAXES, "jpeg-file")
VIT_B32 = (512, 224, 32, 768, 12, 12, 77, 49408, 512, 12, 8)  # CheXzero's ClipSizes


def make_rg1_copies(folder: Path, n: int, syntax: str = "native") -> list[Path]:
    """N distinct RG1-sized files in ``syntax`` (reused when already there)."""
    folder = folder / syntax
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".jpg" if syntax == "jpeg-file" else ".dcm"
    paths = [folder / f"rg1-copy-{i:04d}{suffix}" for i in range(n)]
    if all(p.exists() for p in paths):
        return paths
    rg1 = os.environ.get("CHEXRETRIEVE_RG1") or pydicom_test_file("RG1_UNCI.dcm")
    source = read_radiograph(rg1, ReadConfig())  # $CHEXRETRIEVE_RG1: a machine without pydicom-data
    base = np.round(source.pixels * 32767).astype(np.uint16)
    for i, path in enumerate(paths):
        if path.exists():
            continue
        stored = base.copy()  # a 4 x 4 patch of its own: distinct after lossy compression too
        row, column = (i * 37) % 1900, (i * 53) % 1800
        stored[row : row + 4, column : column + 4] = (i * 2749 + 1000) % 32768
        if syntax == "jpeg-file":
            write_jpeg_file(path, np.rint(stored / 32767 * 255).astype(np.uint8))
            continue
        metadata = {
            "PatientID": f"BENCH{i % 10:03d}",
            "StudyInstanceUID": derive_uid("bench", "study", i),
            "SeriesInstanceUID": derive_uid("bench", "series", i),
            "SOPInstanceUID": derive_uid("bench", "sop", i),
            "Modality": "CR",
            "PatientSex": "F",
            "ViewPosition": "PA",
            "BodyPartExamined": "CHEST",
        }
        write_sample(path, stored, syntax, metadata, bits_stored=15)
    return paths


def archive_files(folder: Path, n: int) -> list[Path]:
    paths = sorted(p for p in folder.rglob("*.dcm") if p.is_file())[:n]
    if len(paths) < n:
        raise SystemExit(f"{folder} holds {len(paths)} DICOM files, fewer than --n {n}")
    return paths


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def load_benchmark_encoder(spec: str, device: str, workdir: Path):  # noqa: ANN201
    if spec == "chexzero-random":
        import torch

        from chexretrieve.encoders.clip_architecture import ClipModel, ClipSizes

        torch.manual_seed(0)
        checkpoint = workdir / "chexzero-random-vit-b32.pt"
        torch.save(ClipModel(ClipSizes(*VIT_B32)).state_dict(), checkpoint)
        return load_encoder(f"chexzero:{checkpoint}", device)
    return load_encoder(spec, device)


def decode_per_worker(reader, paths: list[Path]) -> tuple[float, float, list]:  # noqa: ANN001
    """(images/s, CPU ms per image, results) of the ingest reader here, with one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        decode_one(reader, str(paths[0]), ReadConfig())  # warm-up
        wall, cpu = time.perf_counter(), time.process_time()
        results = [decode_one(reader, str(p), ReadConfig()) for p in paths]
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        torch.set_num_threads(threads)
    bad = [r for r in results if not isinstance(r, Decoded)]
    if bad:
        raise SystemExit(f"the reader rejected a benchmark file: {bad[0]}")
    return rate(len(paths), wall), 1000 * cpu / len(paths), results


def decode_pool_rate(reader, paths: list[Path], workers: int, start_method: str) -> float:  # noqa: ANN001
    with DecodePool(
        workers, reader, ReadConfig(), timeout_s=600, start_method=start_method
    ) as pool:
        pool.submit(-1, str(paths[0]))  # start-up and warm-up, not timed
        pool.get()
        started = time.perf_counter()
        for index, path in enumerate(paths):
            pool.submit(index, str(path))
        for _ in paths:
            _, result = pool.get()
            assert isinstance(result, Decoded), result
        return rate(len(paths), time.perf_counter() - started)


def encoder_rate(encoder, split, results: list, batch: int) -> float:  # noqa: ANN001
    """The encoder stage alone: the model on the preprocessed inputs (or embed_images)."""
    inputs = [r.radiograph.pixels for r in results]
    embed = (lambda chunk: split[1](np.stack(chunk))) if split else encoder.embed_images
    embed(inputs[:batch])  # warm-up
    started = time.perf_counter()
    for start in range(0, len(inputs), batch):
        embed(inputs[start : start + batch])
    return rate(len(inputs), time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=48, help="images (default 48)")
    parser.add_argument("--encoder", default="phantom", help="phantom, chexzero-random or a spec")
    parser.add_argument("--syntax", default="native", choices=SYNTAXES)
    parser.add_argument("--archive", type=Path, help="ingest files of this folder instead of RG1")
    parser.add_argument("--workers", type=int, default=-1, help="decode processes (-1 auto)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--thumbnail-px", type=int, default=256)
    parser.add_argument("--reduced-decode", action="store_true", help="IngestConfig.reduced_decode")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data", type=Path, help="folder for the generated images (kept)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="chexretrieve-bench-") as tmp:
        workdir = Path(tmp)
        started = time.perf_counter()
        if args.archive is not None:
            paths, source = archive_files(args.archive, args.n), f"archive {args.archive}"
        else:
            paths = make_rg1_copies(args.data or workdir / "rg1", args.n, args.syntax)
            source = f"RG1 copies, {args.syntax}"
        print(f"{args.n} files ({source}) ready in {time.perf_counter() - started:.1f} s")
        config = IngestConfig(
            workers=args.workers,
            batch_size=args.batch_size,
            thumbnail_px=args.thumbnail_px,
            reduced_decode=args.reduced_decode,
        )
        workers = max(1, config.resolved_workers)
        encoder = load_benchmark_encoder(args.encoder, args.device, workdir)
        split = split_preprocessing(encoder)
        reader = ingest_reader(config, split[0] if split else None)

        per_worker, cpu_ms, results = decode_per_worker(reader, paths)
        pool = decode_pool_rate(reader, paths, workers, config.start_method)
        encoder_only = encoder_rate(encoder, split, results, args.batch_size)
        del results

        marks: list[tuple[float, int]] = []

        def progress(done: int, total: int) -> None:
            marks.append((time.perf_counter(), done))

        with open_store(f"sqlite:///{workdir / 'bench.sqlite'}") as store:
            report = ingest_paths(paths, store, encoder, config, progress=progress)
        assert report.counts["ingested"] == len(paths), report.counts
        (t_first, n_first), (t_last, n_last) = marks[0], marks[-1]
        steady = rate(n_last - n_first, t_last - t_first)
        whole = rate(len(paths), report.seconds)

    bound = min(per_worker * workers, encoder_only)
    figures = {
        "source": source,
        "encoder": args.encoder,
        "encoder_id": encoder.encoder_id,
        "device": str(getattr(encoder, "device", "cpu")),
        "images": len(paths),
        "workers": workers,
        "batch_size": args.batch_size,
        "thumbnail_px": args.thumbnail_px,
        "reduced_decode": args.reduced_decode,
        "cpu_count": os.cpu_count(),
        "load_average_1min_before_after": f"{load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}",
        "decode_rate_per_worker": round(per_worker, 2),
        "decode_cpu_ms_per_image": round(cpu_ms, 1),
        "decode_rate_pool": round(pool, 2),
        "encoder_only_rate": round(encoder_only, 2),
        "end_to_end_rate_steady": round(steady, 2),
        "end_to_end_rate_whole_run": round(whole, 2),
        "slower_stage": "decode" if per_worker * workers < encoder_only else "encoder",
        "ratio_end_to_end_over_slower_stage": round(steady / bound, 3),
    }
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    ratio = figures["ratio_end_to_end_over_slower_stage"]
    print(
        f"ratio {ratio} {'meets' if ratio >= 0.9 else 'misses'} the goal >= 0.9 "
        f"(end to end / min(decode per worker x {workers}, encoder only))"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
