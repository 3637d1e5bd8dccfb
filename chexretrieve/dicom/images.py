"""PNG and JPEG radiographs (CheXpert and MIMIC-CXR-JPG ship JPEG) read with Pillow."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile

_PILLOW_FORMAT = {"png": "PNG", "jpeg": "JPEG"}


def read_image_file(
    path: Path,
    source_format: str,
    config: ReadConfig,
    notes: list[str],
    *,
    draft_side: int | None = None,
):  # noqa: ANN201 - an array, or (array, full shape, DCT scale) with draft_side
    """The greyscale stored values of a PNG/JPEG file: uint8 or uint16, shape (rows, columns).

    Image size is checked against ``config.max_pixels`` before the pixels are decoded. With
    ``draft_side`` a JPEG decodes at the smallest DCT scale (1/2, 1/4, 1/8) that keeps the long side
    at least ``draft_side``, and the result is (values, full (rows, columns), scale).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path, formats=[_PILLOW_FORMAT[source_format]])
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise RejectedFile(
            "too-large", f"{exc}; the image is far over any radiograph size"
        ) from exc
    except UnidentifiedImageError as exc:
        raise RejectedFile(
            "unsupported-format", f"Pillow cannot identify this {source_format.upper()} file: {exc}"
        ) from exc
    with image:
        columns, rows = image.size
        if rows < 1 or columns < 1:
            raise RejectedFile("invalid-field", f"the image has size {columns} x {rows}")
        if rows * columns > config.max_pixels:
            raise RejectedFile(
                "too-large",
                f"the image is {rows} x {columns} = {rows * columns:,} pixels, over "
                f"ReadConfig.max_pixels = {config.max_pixels:,}; raise the cap if it is genuine",
            )
        scale = 1
        if draft_side is not None:
            factor = max(1, max(rows, columns) // max(1, draft_side))
            if source_format == "jpeg" and factor > 1:
                image.draft(image.mode, (-(-columns // factor), -(-rows // factor)))
                scale = max(1, round(columns / image.size[0]))
        try:
            image.load()
        except OSError as exc:
            reason = "truncated" if "truncated" in str(exc).lower() else "decode-error"
            raise RejectedFile(
                reason, f"the {source_format.upper()} data did not decode ({exc})"
            ) from exc
        values = _greyscale_array(image, config, notes)
        return values if draft_side is None else (values, (rows, columns), scale)


def _greyscale_array(image: Image.Image, config: ReadConfig, notes: list[str]) -> np.ndarray:
    mode = image.mode
    if mode == "L":
        return np.asarray(image, dtype=np.uint8).copy()
    if mode.startswith("I;16"):
        return np.asarray(image).astype(np.uint16)
    if mode == "I":
        values = np.asarray(image)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise RejectedFile(
                "unsupported-format", "32-bit integer pixels outside 0..65535 are not read"
            )
        return values.astype(np.uint16)
    if mode == "1":
        notes.append("bilevel image read as 8-bit greyscale")
        return np.asarray(image.convert("L"), dtype=np.uint8).copy()
    if mode in ("LA", "La"):
        notes.append("alpha channel ignored")
        return np.asarray(image.getchannel("L"), dtype=np.uint8).copy()
    if mode in ("RGB", "RGBA", "RGBa", "P", "PA"):
        return _grey_from_colour(image.convert("RGB"), config, notes)
    raise RejectedFile(
        "photometric", f"pixel mode {mode} is not greyscale; save the radiograph as greyscale"
    )


def _grey_from_colour(image: Image.Image, config: ReadConfig, notes: list[str]) -> np.ndarray:
    """Grey saved as RGB (channels agree) as one channel; a real colour image is rejected."""
    rgb = np.asarray(image, dtype=np.int16)
    spread = int(np.max(rgb.max(axis=2) - rgb.min(axis=2))) if rgb.size else 0
    if spread == 0:
        return rgb[..., 0].astype(np.uint8)
    if spread <= config.grey_tolerance:
        notes.append(f"RGB channels differ by up to {spread}; converted to grey (ITU-R 601 luma)")
        return np.asarray(image.convert("L"), dtype=np.uint8).copy()
    raise RejectedFile(
        "photometric",
        f"a colour image (channels differ by up to {spread} > ReadConfig.grey_tolerance = "
        f"{config.grey_tolerance}); only greyscale radiographs are read",
    )


def image_display_pixels(stored: np.ndarray) -> np.ndarray:
    """PNG/JPEG values are already display values: scale by the bit depth into [0, 1]."""
    full_scale = 255.0 if stored.dtype == np.uint8 else 65535.0
    return (stored.astype(np.float32) * np.float32(1.0 / full_scale)).clip(0.0, 1.0)
