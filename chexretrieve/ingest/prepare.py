"""What a decoding worker hands the main process: one decode, then small arrays only.

``ingest_reader(config, split)`` assembles the picklable reader the decode pool runs on each file:

1. ``WorkingReader``: ``chexretrieve.dicom.read_working_radiograph`` decodes the file once, keeps
   its identity (the hash of every stored value) and box-reduces it to the smallest integer
   fraction whose long side still covers what the encoder's preprocessing and the thumbnail need
   (``working_side``); the display transform runs on that small image. With
   ``IngestConfig.reduced_decode`` JPEG and JPEG 2000 decode at reduced size in the codec itself
   (see ``chexretrieve.dicom.working`` for what that changes about identity), and with
   ``IngestConfig.gpu_jpeg`` JPEG decodes on the GPU (nvJPEG) in each worker;
2. ``ThumbnailReader`` renders the stored thumbnail from the working pixels;
3. ``PreprocessingReader`` turns them into the encoder's model input (its ``from_working``), so
   a few hundred kB cross to the main process, which only runs the model.

Encoders without a separate preprocessing (hf-clip, the stand-in) receive full-resolution
pixels as before: their own processors decide how to shrink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from chexretrieve.ingest.config import IngestConfig
from chexretrieve.ingest.decode_pool import PreprocessingReader
from chexretrieve.ingest.thumbnails import ThumbnailReader

#: the thumbnail is drawn from at least this many working pixels per thumbnail pixel
THUMBNAIL_GAP = 1.5


@dataclass(frozen=True)
class WorkingReader:
    """Reads a radiograph at working resolution (picklable: it runs in the decoding workers)."""

    working_side: int  # smallest long side kept (0: full resolution)
    codec: str  # "full", "reduced" (JPEG / JPEG 2000 at reduced size) or "gpu" (nvJPEG)

    def __call__(self, path: str, read_config: Any) -> Any:
        from chexretrieve.dicom.working import read_working_radiograph

        return read_working_radiograph(
            path,
            read_config,
            working_side=self.working_side,
            codec=self.codec,
        )


def working_side_for(config: IngestConfig, preprocess: Any) -> int:
    """The long side both the encoder's preprocessing and the thumbnail can start from; 0 (full
    resolution) when the encoder's preprocessing cannot say (no ``working_side``)."""
    encoder_side = getattr(preprocess, "working_side", 0) if preprocess is not None else 0
    if not encoder_side:
        return 0
    thumbnail_side = math.ceil(THUMBNAIL_GAP * config.thumbnail_px) if config.thumbnail_px else 0
    return max(int(encoder_side), thumbnail_side)


def ingest_reader(config: IngestConfig, preprocess: Any, base: Any = None) -> Any:
    """The reader the decode pool runs: working resolution, thumbnail, model input (see the
    module docstring). ``base``: a reader given by the caller (tests, other sources), used at full
    resolution in place of the working reader."""
    if base is None:
        side = working_side_for(config, preprocess)
        reader: Any = WorkingReader(side, config.codec)
    else:
        reader = base
    if config.thumbnail_px > 0:  # rendered from the display pixels, before any preprocessing
        reader = ThumbnailReader(reader, config.thumbnail_px)
    if preprocess is not None:
        reader = PreprocessingReader(reader, preprocess)
    return reader
