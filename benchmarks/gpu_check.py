"""The GPU path run for real: ingest on CUDA, embeddings against the CPU's, rates and utilisation.

    python3 benchmarks/gpu_check.py [--out DIR] [--phantom 3000] [--rg1 256] [--dry-run]

Run by ``benchmarks/gpu_check.sh run`` on a CUDA machine (one call of the device tool), or with
``--dry-run`` here on the CPU (small sizes, float32 only, no nvJPEG), which is what
tests/ingest/test_gpu_check.py runs so the script cannot rot between GPU sessions. Steps:

1. the phantom demo archive (``--phantom`` images, 320 x 320 RLE) and ``--rg1`` copies of RG1
   (15-bit native DICOM) and as many 8-bit JPEG files, generated on the machine;
2. the CheXzero-architecture ViT-B/32 with random weights (seed 0), saved as a CheXzero checkpoint;
3. encoder only: the model on preprocessed inputs, images/s in float32, float16 and bfloat16;
4. for each precision: ``ingest_paths`` over the archive and the RG1 copies into a fresh store,
   end-to-end images/s, with the GPU's utilisation sampled every 0.2 s (nvidia-smi);
5. agreement: every stored embedding of a subset against the same images embedded on the CPU in
   float32: per-image cosine (min, 1st percentile, mean); float32 on the GPU should give >= 0.9999
   and the mixed precisions >= 0.999;
6. decode per worker on the JPEG files: CPU (full), CPU (reduced, DCT scaling), GPU (nvJPEG);
7. everything in ``OUT/gpu_check.json`` (and printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ingest import decode_per_worker, load_benchmark_encoder, make_rg1_copies  # noqa: E402

from chexretrieve.encoders.base import split_preprocessing  # noqa: E402
from chexretrieve.encoders.config import EncoderConfig  # noqa: E402
from chexretrieve.encoders.registry import load_encoder  # noqa: E402
from chexretrieve.ingest import IngestConfig, ingest_paths  # noqa: E402
from chexretrieve.ingest.prepare import ingest_reader  # noqa: E402
from chexretrieve.store import open_store  # noqa: E402

PRECISIONS = {"float32": (False, "float16"), "float16": (True, "float16"),
              "bfloat16": (True, "bfloat16")}  # fmt: skip


class UtilisationSampler:
    """GPU utilisation (%) read from nvidia-smi every ``period`` seconds while running."""

    def __init__(self, period: float = 0.2) -> None:
        self.period, self.samples, self._stop = period, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            try:
                text = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout
                self.samples.append(float(text.split()[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return  # no nvidia-smi (CPU dry run)
            self._stop.wait(self.period)

    def __enter__(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        return {"mean": round(float(np.mean(self.samples)), 1), "max": max(self.samples),
                "samples": len(self.samples)}  # fmt: skip


def environment() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
            "cpu_count": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 1)}  # fmt: skip
    if info["cuda"]:
        info["gpu"] = torch.cuda.get_device_name(0)
        free, total = torch.cuda.mem_get_info(0)
        info["gpu_memory_free_gib"] = round(free / 2**30, 1)
        info["gpu_memory_total_gib"] = round(total / 2**30, 1)
    try:
        import torchvision

        info["torchvision"] = torchvision.__version__
    except Exception as exc:  # noqa: BLE001
        info["torchvision"] = f"unavailable ({type(exc).__name__})"
    return info


def encoder_for(checkpoint: Path, device: str, precision: str):  # noqa: ANN201
    use_autocast, dtype = PRECISIONS[precision]
    config = EncoderConfig(device=device, use_autocast=use_autocast, autocast_dtype=dtype)
    return load_encoder(f"chexzero:{checkpoint}", config=config)


def encoder_only(encoder, inputs: np.ndarray, repeats: int) -> float:  # noqa: ANN001
    encoder.embed_preprocessed(inputs[: min(len(inputs), 64)])  # warm-up, batch size probe
    started = time.perf_counter()
    for _ in range(repeats):
        encoder.embed_preprocessed(inputs)
    return repeats * len(inputs) / (time.perf_counter() - started)


def cosines(stored: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict:
    shared = sorted(set(stored) & set(reference))
    values = np.array([float(np.dot(stored[k], reference[k])) for k in shared])
    return {"images": len(shared), "min": round(float(values.min()), 6),
            "p01": round(float(np.percentile(values, 1)), 6),
            "mean": round(float(values.mean()), 6)}  # fmt: skip


def stored_by_path(db: Path, encoder_id: str) -> dict[str, np.ndarray]:
    with open_store(f"sqlite:///{db}") as store:
        gallery = store.gallery(encoder_id)
        paths = gallery.metadata.source_path.tolist()
        return dict(zip(paths, gallery.vectors, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--phantom", type=int, default=3000)
    parser.add_argument("--rg1", type=int, default=256)
    parser.add_argument("--reference", type=int, default=96, help="images embedded on the CPU")
    parser.add_argument("--dry-run", action="store_true", help="CPU, float32, small")
    args = parser.parse_args()
    import torch

    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run on a CPU machine")
    precisions = ["float32"] if args.dry_run else list(PRECISIONS)
    figures: dict = {"environment": environment(), "dry_run": args.dry_run}
    print(json.dumps(figures["environment"]), flush=True)
    workers = max(1, min(15, (os.cpu_count() or 2) - 1))
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        archive = ArchiveConfig(n=args.phantom, seed=0, workers=workers)
        write_archive(work / "phantom", archive, PhantomConfig())
        native = make_rg1_copies(work / "rg1", args.rg1, "native")
        jpegs = make_rg1_copies(work / "rg1", args.rg1, "jpeg-file")
        figures["data_seconds"] = round(time.perf_counter() - started, 1)
        paths = [work / "phantom", *native, *jpegs]
        checkpoint_encoder = load_benchmark_encoder("chexzero-random", "cpu", work)
        checkpoint = work / "chexzero-random-vit-b32.pt"
        del checkpoint_encoder

        # the CPU reference: a subset of files through the same reader, embedded in float32
        cpu = encoder_for(checkpoint, "cpu", "float32")
        split = split_preprocessing(cpu)
        reader = ingest_reader(IngestConfig(), split[0])
        subset = sorted((work / "phantom").rglob("*.dcm"))[: args.reference // 2]
        subset += native[: args.reference // 4] + jpegs[: args.reference // 4]
        _, _, decoded = decode_per_worker(reader, subset)
        inputs = np.stack([d.radiograph.pixels for d in decoded])
        reference = dict(zip(map(str, subset), cpu.embed_preprocessed(inputs), strict=True))

        size = len(inputs) if args.dry_run else 1024
        big = np.concatenate([inputs] * max(1, size // len(inputs)))[:size]
        figures["encoder_only_images_per_s"] = {}
        figures["ingest"] = {}
        for precision in precisions:
            encoder = encoder_for(checkpoint, device, precision)
            rate = encoder_only(encoder, big, repeats=1 if args.dry_run else 5)
            figures["encoder_only_images_per_s"][precision] = round(rate, 1)
            batch = getattr(encoder, "_auto_image_batch", None) or encoder.batch_size
            config = IngestConfig(workers=workers, batch_size=max(16, batch),
                                  prefetch_batches=2)  # fmt: skip
            db = work / f"{precision}.sqlite"
            with open_store(f"sqlite:///{db}") as store, UtilisationSampler() as sampler:
                started = time.perf_counter()
                report = ingest_paths(paths, store, encoder, config)
                seconds = time.perf_counter() - started
            stored = stored_by_path(db, encoder.encoder_id)
            figures["ingest"][precision] = {
                "files": len(report.outcomes), "counts": report.counts,
                "seconds": round(seconds, 1),
                "images_per_s": round(report.counts["ingested"] / seconds, 1),
                "workers": workers, "batch_size": config.batch_size,
                "gpu_utilisation_percent": sampler.summary(),
                "cosine_to_cpu_float32": cosines(stored, reference),
            }  # fmt: skip
            print(precision, json.dumps(figures["ingest"][precision]), flush=True)

        decode: dict = {}
        for codec, settings in (("cpu-full", {}), ("cpu-reduced", {"reduced_decode": True}),
                                ("gpu-nvjpeg", {"gpu_jpeg": True})):  # fmt: skip
            if codec == "gpu-nvjpeg" and args.dry_run:
                decode[codec] = "skipped in the dry run"
                continue
            try:
                jpeg_reader = ingest_reader(IngestConfig(**settings), split[0])
                per_worker, cpu_ms, _ = decode_per_worker(jpeg_reader, jpegs[:64])
                decode[codec] = {"images_per_s": round(per_worker, 1), "cpu_ms": round(cpu_ms, 1)}
            except Exception as exc:  # noqa: BLE001 - reported, the other figures still count
                decode[codec] = f"failed: {type(exc).__name__}: {exc}"
        figures["jpeg_decode_per_worker"] = decode
    figures["load_average_1min_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps(figures, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")
    worst = min(v["cosine_to_cpu_float32"]["min"] for v in figures["ingest"].values())
    print(f"lowest per-image cosine to the CPU's float32 embedding: {worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
