"""Thumbnails: a small 8-bit greyscale PNG of a radiograph's default display, made once at ingest.

``thumbnail_png(pixels, max_side)`` renders display pixels (float32 in [0, 1], as
:class:`~chexretrieve.dicom.Radiograph` holds them) under the default window, shrinks them so the
longer side is at most ``max_side`` (never enlarges) and encodes a PNG; ``thumbnail_pixels(png)``
decodes one back (ValueError for bytes that are not a greyscale PNG). The store keeps them
(``Store.read_thumbnails``), so a results page never decodes the archived DICOM files.
"""

from __future__ import annotations

import io

import numpy as np

from chexretrieve.dicom.pixels import render_for_display

#: longest side of the thumbnails ingest writes by default (IngestConfig.thumbnail_px)
DEFAULT_THUMBNAIL_PX = 256


def shrink(display: np.ndarray, max_side: int) -> np.ndarray:
    """An 8-bit image resized (Lanczos) so its longer side is at most ``max_side`` pixels."""
    from PIL import Image

    if max_side < 1:
        raise ValueError(f"thumbnail size must be at least 1 pixel, got {max_side}")
    rows, cols = display.shape
    scale = max_side / max(rows, cols)
    if scale >= 1:
        return np.ascontiguousarray(display)
    size = (max(1, round(cols * scale)), max(1, round(rows * scale)))
    # reducing_gap: a box reduction first, then Lanczos over the last factor of 3 (fast on 3k px)
    image = Image.fromarray(display).resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    return np.asarray(image)


def thumbnail_png(pixels: np.ndarray, max_side: int = DEFAULT_THUMBNAIL_PX) -> bytes:
    """PNG bytes of the default display of ``pixels`` (2-D float in [0, 1]), longest side at most
    ``max_side``."""
    from PIL import Image

    pixels = np.asarray(pixels, dtype=np.float32)
    if pixels.ndim != 2:
        raise ValueError(f"expected a 2-D greyscale image, got shape {pixels.shape}")
    factor = max(pixels.shape) // max_side if max_side >= 1 else 0
    if factor > 1:  # box-average the float pixels first (whole blocks: the aspect ratio holds)
        rows, columns = pixels.shape
        box = (0, 0, columns - columns % factor, rows - rows % factor)
        pixels = np.asarray(Image.fromarray(pixels).reduce(factor, box), dtype=np.float32)
    display = render_for_display(pixels)
    buffer = io.BytesIO()
    # zlib level 1: ~6x faster than the default 6 for ~15% more bytes (ingest renders every image)
    Image.fromarray(shrink(display, max_side)).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def thumbnail_pixels(png: bytes) -> np.ndarray:
    """The (rows, columns) uint8 array of a thumbnail PNG; ValueError when it is not one."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(png), formats=["PNG"]) as image:
            if image.mode != "L":
                raise ValueError(f"a thumbnail is an 8-bit greyscale PNG, not mode {image.mode}")
            return np.asarray(image)
    except (OSError, UnidentifiedImageError) as exc:
        raise ValueError(f"stored thumbnail is not a readable PNG: {exc}") from None
