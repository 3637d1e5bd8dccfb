"""Pixel values for a viewer: the image in its own value units, windowed by the DICOM linear VOI.

``read_pixel_values(path)`` reads a DICOM, PNG or JPEG radiograph into :class:`PixelValues`: the
modality values (stored values after Rescale Slope / Intercept; the stored values themselves when
the slope is 1 and the intercept 0, as in CR/DX files and the phantoms), the file's own default
window (its first Window Center / Width; else, for a file with only a VOI LUT Sequence, the linear
window over which that LUT rises (``voi_lut_window``); else the bit depth for PNG / JPEG; else the
value range) and whether the lowest value shows white (MONOCHROME1, or an INVERSE presentation
LUT).

``linear_window(values, center, width)`` maps values to 8-bit grey by the linear VOI function of
DICOM PS3.3 C.11.2.1.2 (the function Window Center / Width define):

    x <= c - 0.5 - (w - 1) / 2      -> 0 (black)
    x >  c - 0.5 + (w - 1) / 2      -> 255 (white)
    otherwise                        -> ((x - (c - 0.5)) / (w - 1) + 0.5) * 255

rounded to the nearest grey level; ``invert`` shows 255 minus that.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from pydicom.pixels.processing import apply_modality_lut

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile
from chexretrieve.dicom.images import read_image_file
from chexretrieve.dicom.metadata import read_window
from chexretrieve.dicom.pixels import (
    _check_rescale,
    _inverted,
    decode_stored_pixels,
    voi_lut_window,
)
from chexretrieve.dicom.read import _guarded, _open_checked, _validated_header


@dataclass(frozen=True, eq=False)
class PixelValues:
    """One radiograph's values for a viewer (see the module doc)."""

    # float32 (rows, columns): modality values, box-averaged when shrunk to the viewer's size
    values: np.ndarray
    # the image's own default window, in the same units as ``values``
    default_center: float
    default_width: float
    # where the default window comes from: "DICOM window", "bit depth" or "value range"
    window_source: str
    # True when the lowest value shows white (MONOCHROME1, or MONOCHROME2 with INVERSE)
    invert: bool
    # smallest and largest value of the image (before shrinking)
    low: float
    high: float
    # rows and columns of the image as stored (before shrinking)
    stored_shape: tuple[int, int]


def read_pixel_values(
    path: str | os.PathLike[str], config: ReadConfig | None = None, max_side: int | None = None
) -> PixelValues:
    """The values of a DICOM / PNG / JPEG radiograph, shrunk (box average by a whole factor) so
    the longer side is at most ``max_side``; :class:`RejectedFile` for anything unreadable."""
    config = config or ReadConfig()
    if max_side is not None and max_side < 1:
        raise ValueError(f"max_side must be at least 1, got {max_side}")
    return _guarded(Path(path), lambda p, notes: _read_values(p, config, notes, max_side))


def _read_values(
    path: Path, config: ReadConfig, notes: list[str], max_side: int | None
) -> PixelValues:
    found, _ = _open_checked(path, config)
    if found != "dicom":
        stored = read_image_file(path, found, config, notes)
        full_scale = 255.0 if stored.dtype == np.uint8 else 65535.0
        values = stored.astype(np.float32)
        window = ((full_scale + 1) / 2, full_scale + 1, "bit depth")
        invert = False
    else:
        ds, _, module = _validated_header(path, config, notes, header_only=False)
        stored = decode_stored_pixels(ds, module, config)
        _check_rescale(ds, notes)
        values = np.asarray(apply_modality_lut(stored, ds), dtype=np.float32)
        if not np.isfinite(values).all():
            raise RejectedFile(
                "invalid-field", "the modality LUT or rescale gives non-finite values"
            )
        center, width = read_window(ds, notes)
        window = (center, width, "DICOM window") if center is not None else None
        if window is None and "VOILUTSequence" in ds:
            window = _lut_window(ds, notes)
        invert = _inverted(ds, module, notes)
    low, high = float(values.min()), float(values.max())
    if window is None:  # no usable window: the whole value range
        window = ((low + high + 1) / 2, max(1.0, high - low + 1), "value range")
    return PixelValues(
        values=shrink_values(values, max_side),
        default_center=float(window[0]),
        default_width=float(window[1]),
        window_source=window[2],
        invert=bool(invert),
        low=low,
        high=high,
        stored_shape=(int(values.shape[0]), int(values.shape[1])),
    )


def _lut_window(ds, notes: list[str]) -> tuple[float, float, str] | None:
    """The VOI LUT's linear stand-in window, or None (with a note) when the LUT cannot give one."""
    try:
        center, width = voi_lut_window(ds)
    except RecursionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed LUT: open on the value range, say why
        notes.append(f"VOI LUT Sequence gives no default window ({type(exc).__name__}: {exc})")
        return None
    return center, width, "VOI LUT range"


def fitted_values(pixels: PixelValues, max_side: int | None) -> PixelValues:
    """``pixels`` with its values shrunk (``shrink_values``) to at most ``max_side`` on the longer
    side; the default window, range and stored shape are those of the whole image."""
    shrunk = shrink_values(pixels.values, max_side)
    if shrunk is pixels.values or shrunk.shape == pixels.values.shape:
        return pixels
    return replace(pixels, values=shrunk)


def shrink_values(values: np.ndarray, max_side: int | None) -> np.ndarray:
    """Box-average float values by the smallest whole factor that brings the longer side to at
    most ``max_side`` (None or a smaller image: unchanged)."""
    from PIL import Image

    values = np.asarray(values, dtype=np.float32)
    if max_side is None or max(values.shape) <= max_side:
        return values
    factor = math.ceil(max(values.shape) / max_side)
    return np.asarray(Image.fromarray(values).reduce(factor), dtype=np.float32)


def check_window(center: float, width: float) -> tuple[float, float]:
    """(center, width) as floats; ValueError unless both are finite and width >= 1 (PS3.3)."""
    try:
        center, width = float(center), float(width)
    except (TypeError, ValueError):
        raise ValueError(
            f"window centre and width must be numbers, not {center!r} / {width!r}"
        ) from None
    if not (math.isfinite(center) and math.isfinite(width)):
        raise ValueError(f"window centre {center} / width {width} must be finite numbers")
    if width < 1:
        raise ValueError(f"window width must be at least 1 (DICOM), not {width:g}")
    return center, width


def linear_window(
    values: np.ndarray, center: float, width: float, invert: bool = False
) -> np.ndarray:
    """8-bit grey of ``values`` under the DICOM linear VOI window (center, width); see the module
    doc for the formula. ValueError for a width below 1 or a value that is not finite."""
    center, width = check_window(center, width)
    x = np.asarray(values, dtype=np.float64)
    below = x <= center - 0.5 - (width - 1) / 2
    above = x > center - 0.5 + (width - 1) / 2
    if width > 1:
        y = ((x - (center - 0.5)) / (width - 1) + 0.5) * 255.0
    else:  # a width of 1 is a threshold: every value is below or above
        y = np.zeros_like(x)
    y = np.where(below, 0.0, np.where(above, 255.0, y))
    grey = np.rint(np.clip(y, 0.0, 255.0)).astype(np.uint8)
    return 255 - grey if invert else grey
