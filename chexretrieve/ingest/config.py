"""Settings of ``chexretrieve ingest``: parallel decoding, batching, limits, strictness."""

from __future__ import annotations

import os
from dataclasses import dataclass


def default_workers() -> int:
    """One decoding process per core, leaving one core to inference (at least one)."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


@dataclass(frozen=True)
class IngestConfig:
    # decoding processes; 0 decodes in the main process (no overlap with inference, for debugging)
    workers: int = -1  # -1 = automatic: one per core minus one, between 1 and 8
    # images per encoder call and per database transaction
    batch_size: int = 16
    # batches decoded ahead of the encoder (bounds memory: about (prefetch + 1) x batch images)
    prefetch_batches: int = 1
    # seconds one file may take to decode before its worker is killed and the file rejected
    file_timeout_s: float = 120.0
    # address-space cap per decoding process in MiB (0 = none); a file exceeding it is rejected
    worker_memory_mb: int = 0
    # how workers start: "forkserver" (fast restarts, preloaded reader) or "spawn"; never "fork",
    # which is unsafe once torch has started threads
    start_method: str = "forkserver"
    # any rejected or conflicting file makes the command exit non-zero (the run still completes)
    strict: bool = False
    # follow symbolic links while walking: into folders, and to files outside the walked folder
    follow_symlinks: bool = False
    # file name endings walked in folders (case-insensitive); files without any ending also count
    extensions: tuple[str, ...] = (".dcm", ".dicom", ".dic", ".png", ".jpg", ".jpeg")
    # split written to images that no labels row assigns one to (None leaves it empty)
    split: str | None = None
    # consecutive images the encoder fails on before the run stops as broken
    max_consecutive_embed_failures: int = 32
    # decoding workers also run the encoder's own preprocessing (resize, pad, normalise) when the
    # encoder offers it apart from the model (phantom, CheXzero) and no worker memory cap is set;
    # the main process then only runs the model
    preprocess_in_workers: bool = True
    # longest side in pixels of the PNG thumbnail stored with each image (rendered by the decoding
    # workers; the UI shows results from it without reading their files); 0 = no thumbnails
    thumbnail_px: int = 256
    # decode JPEG and JPEG 2000 at reduced size in the codec (DCT scaling, wavelet levels): 2-4x
    # faster for them, but such images are identified by a hash of their compressed data instead
    # of their pixel values (docs/ingest.md); keep one choice per archive
    reduced_decode: bool = False
    # decode JPEG (JPEG files, DICOM JPEG Baseline) with nvJPEG on the GPU in each decoding worker
    # (torchvision.io.decode_jpeg); needs CUDA and torchvision, refused otherwise; identity as with
    # reduced_decode
    gpu_jpeg: bool = False
    # run the encoder on its own thread, overlapping the next batch's decoding and the previous
    # batch's store write (False: one batch at a time in the main thread, for debugging)
    overlap_encoder: bool = True

    def __post_init__(self) -> None:
        if self.workers < -1:
            raise ValueError(f"workers must be -1 (automatic), 0 or positive, got {self.workers}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {self.batch_size}")
        if self.prefetch_batches < 1:
            raise ValueError(f"prefetch_batches must be at least 1, got {self.prefetch_batches}")
        if self.file_timeout_s <= 0:
            raise ValueError(f"file timeout must be positive, got {self.file_timeout_s}")
        if self.worker_memory_mb < 0:
            raise ValueError(f"worker_memory_mb must be 0 or positive, got {self.worker_memory_mb}")
        if not 0 <= self.thumbnail_px <= 4096:
            raise ValueError(f"thumbnail_px must be between 0 and 4096, got {self.thumbnail_px}")
        if self.gpu_jpeg and self.worker_memory_mb:
            raise ValueError(
                "gpu_jpeg cannot run under worker_memory_mb: a CUDA context needs more address "
                "space than such a cap allows"
            )
        if self.start_method not in ("spawn", "forkserver"):
            raise ValueError(
                f"start_method {self.start_method!r} is not 'spawn' or 'forkserver' (fork is "
                "unsafe once torch has started threads)"
            )

    @property
    def codec(self) -> str:
        """How the decoding workers run the codec (chexretrieve.dicom.working.CODECS)."""
        return "gpu" if self.gpu_jpeg else "reduced" if self.reduced_decode else "full"

    @property
    def resolved_workers(self) -> int:
        return default_workers() if self.workers == -1 else self.workers
