"""DICOM pixels: validate the image pixel module, bound the work, decode, and make display values.

The order matters for safety: every size the header claims is checked against the configured cap and
against the bytes actually present *before* a decoder allocates its output array.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
from pydicom import uid as dicom_uid
from pydicom.dataset import Dataset
from pydicom.pixels import get_decoder, pixel_array
from pydicom.pixels.processing import apply_modality_lut, apply_voi, apply_windowing

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile
from chexretrieve.dicom.metadata import get_element, optional_int, optional_text, required_int

_GREYSCALE = ("MONOCHROME1", "MONOCHROME2")
# PackBits (the RLE of DICOM) turns at most 2 encoded bytes into 128 decoded ones
_RLE_MAX_EXPANSION = 64
_GPL_HINT = (
    "12-bit JPEG (Process 2 and 4) needs the optional GPL codec: "
    "pip install 'chexretrieve[gpl-codecs]' (pylibjpeg-libjpeg)"
)


@dataclass(frozen=True)
class PixelModule:
    """The validated image pixel module of one single-frame greyscale image."""

    rows: int
    columns: int
    photometric: str
    bits_allocated: int
    bits_stored: int
    pixel_representation: int  # 0 unsigned, 1 two's complement
    transfer_syntax: dicom_uid.UID

    @property
    def n_pixels(self) -> int:
        return self.rows * self.columns


def transfer_syntax_of(ds: Dataset, notes: list[str]) -> dicom_uid.UID:
    """The transfer syntax from the file meta, else the encoding pydicom found (no meta)."""
    meta = getattr(ds, "file_meta", None)
    text = optional_text(meta, "TransferSyntaxUID", notes) if meta is not None else None
    if text is not None:
        return dicom_uid.UID(text)
    implicit, little = ds.original_encoding
    if implicit is None:
        raise RejectedFile(
            "invalid-field", "no Transfer Syntax UID and the encoding cannot be determined"
        )
    if implicit:
        syntax = dicom_uid.ImplicitVRLittleEndian
    else:
        syntax = dicom_uid.ExplicitVRLittleEndian if little else dicom_uid.ExplicitVRBigEndian
    notes.append(f"no Transfer Syntax UID in the file meta; read as {syntax.name}")
    return syntax


def read_pixel_module(ds: Dataset, notes: list[str]) -> PixelModule:
    """Validate every image pixel module field decoding relies on (RejectedFile otherwise)."""
    samples = optional_int(ds, "SamplesPerPixel", default=0, low=1, high=4, notes=notes)
    if samples == 0:
        notes.append("SamplesPerPixel is missing; assumed 1")
        samples = ds.SamplesPerPixel = 1  # the decoders need the element itself
    photometric_text = optional_text(ds, "PhotometricInterpretation", notes)
    if photometric_text is None:
        raise RejectedFile(
            "missing-field", "PhotometricInterpretation is missing; cannot tell how to show pixels"
        )
    photometric = photometric_text.upper()
    if photometric not in _GREYSCALE or samples != 1:
        raise RejectedFile(
            "photometric",
            f"PhotometricInterpretation {photometric} with {samples} sample(s) per pixel is not "
            "greyscale; only MONOCHROME1/MONOCHROME2 radiographs are read",
        )
    rows = required_int(ds, "Rows", vrs=("US",), low=1, high=65535, notes=notes)
    columns = required_int(ds, "Columns", vrs=("US",), low=1, high=65535, notes=notes)
    bits_allocated = required_int(ds, "BitsAllocated", vrs=("US",), low=1, high=64, notes=notes)
    if bits_allocated == 1:
        raise RejectedFile(
            "unsupported-format", "1-bit (bilevel) pixel data is a mask, not a radiograph"
        )
    if bits_allocated not in (8, 16, 32):
        raise RejectedFile(
            "invalid-field", f"BitsAllocated must be 8, 16 or 32 for an image, got {bits_allocated}"
        )
    bits_stored = required_int(
        ds, "BitsStored", vrs=("US",), low=1, high=bits_allocated, notes=notes
    )
    representation = required_int(
        ds, "PixelRepresentation", vrs=("US",), low=0, high=1, notes=notes
    )
    high_bit = get_element(ds, "HighBit", required=False, notes=notes)
    if high_bit is not None and high_bit.value != bits_stored - 1:
        notes.append(f"HighBit {high_bit.value!r} is not BitsStored - 1 = {bits_stored - 1}")
    return PixelModule(
        rows=rows,
        columns=columns,
        photometric=photometric,
        bits_allocated=bits_allocated,
        bits_stored=bits_stored,
        pixel_representation=representation,
        transfer_syntax=transfer_syntax_of(ds, notes),
    )


def check_pixel_budget(module: PixelModule, data_length: int | None, config: ReadConfig) -> None:
    """Reject, from the header alone, images over the cap and pixel data too short for the header.

    ``data_length`` is the number of Pixel Data bytes present (None: unknown, skip that check).
    """
    if module.n_pixels > config.max_pixels:
        raise RejectedFile(
            "too-large",
            f"the header claims {module.rows} x {module.columns} = {module.n_pixels:,} pixels, "
            f"over ReadConfig.max_pixels = {config.max_pixels:,}; raise it if the image is genuine",
        )
    try:
        decoder = get_decoder(module.transfer_syntax)
    except NotImplementedError:
        raise RejectedFile(
            "unsupported-format",
            f"transfer syntax {module.transfer_syntax} ({module.transfer_syntax.name}) cannot be "
            "decoded; convert the file to Explicit VR Little Endian (e.g. dcmconv) and retry",
        ) from None
    if data_length is None:
        return
    expected = module.n_pixels * (module.bits_allocated // 8)
    if decoder.is_native and data_length < expected:
        raise RejectedFile(
            "truncated",
            f"Pixel Data holds {data_length:,} bytes but {module.rows} x {module.columns} pixels "
            f"of {module.bits_allocated} bits need {expected:,}; the file is cut short",
        )
    if module.transfer_syntax == dicom_uid.RLELossless:
        if expected > _RLE_MAX_EXPANSION * data_length + 64:
            raise RejectedFile(
                "truncated",
                f"RLE Pixel Data of {data_length:,} bytes cannot expand to the {expected:,} bytes "
                f"that {module.rows} x {module.columns} pixels need; the file is cut or corrupt",
            )


#: the fastest decoder of each syntax here, tried first when ReadConfig.decoding_plugins is empty
#: (benchmarks/decode_stages.py, RG1 at 1955 x 1841): Pillow's libjpeg-turbo gives the same values
#: as gdcm for JPEG Baseline in a seventh of the time, pylibjpeg-rle decodes RLE 7x faster than
#: pydicom's own decoder, openjpeg through pylibjpeg beats gdcm slightly; all are lossless or agree
FASTEST_PLUGINS = {
    dicom_uid.JPEGBaseline8Bit: ("pillow",),
    dicom_uid.RLELossless: ("pylibjpeg",),
    dicom_uid.JPEG2000Lossless: ("pylibjpeg",),
    dicom_uid.JPEG2000: ("pylibjpeg",),
}


def _plugin_order(
    available: tuple[str, ...], preferred: tuple[str, ...], syntax: dicom_uid.UID | None = None
) -> list[str]:
    preferred = preferred or FASTEST_PLUGINS.get(syntax, ())
    first = [name for name in preferred if name in available]
    return first + [name for name in available if name not in first]


def decode_stored_pixels(ds: Dataset, module: PixelModule, config: ReadConfig) -> np.ndarray:
    """Stored values (rows, columns) as integers, BitsStored respected, native byte order."""
    decoder = get_decoder(module.transfer_syntax)
    meta = ds.file_meta
    if meta.get("TransferSyntaxUID") != module.transfer_syntax:
        meta.TransferSyntaxUID = module.transfer_syntax
    if decoder.is_native:
        try:
            array = pixel_array(ds, raw=True)
        except Exception as exc:  # noqa: BLE001 - corrupt data surfaces as many exception types
            raise RejectedFile(
                "decode-error", f"native pixel data cannot be read ({type(exc).__name__}: {exc})"
            ) from exc
    else:
        array = _decode_encapsulated(ds, module, decoder.available_plugins, config)
    if array.shape != (module.rows, module.columns):
        raise RejectedFile(
            "decode-error",
            f"decoded pixels have shape {array.shape}, but the header says "
            f"({module.rows}, {module.columns}); the file is inconsistent",
        )
    if array.dtype.kind not in "iu":
        raise RejectedFile("unsupported-format", f"pixel values of type {array.dtype} are not read")
    array = array.astype(array.dtype.newbyteorder("="), copy=False)
    return _respect_bits_stored(array, module)


def _decode_encapsulated(
    ds: Dataset, module: PixelModule, available: tuple[str, ...], config: ReadConfig
) -> np.ndarray:
    syntax = module.transfer_syntax
    twelve_bit_jpeg = syntax == dicom_uid.JPEGExtended12Bit and module.bits_stored > 8
    if not available:
        hint = _GPL_HINT if twelve_bit_jpeg else "install a pylibjpeg or gdcm plugin for it"
        raise RejectedFile("decode-error", f"no decoder for {syntax.name} is installed; {hint}")
    failures = []
    for plugin in _plugin_order(available, config.decoding_plugins, syntax):
        try:
            return pixel_array(ds, raw=True, decoding_plugin=plugin)
        except (RecursionError, KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        # each plugin fails in its own way; a Rust codec (pylibjpeg-rle) panics on corrupt data with
        # pyo3's PanicException, a BaseException
        except BaseException as exc:  # noqa: BLE001
            failures.append(f"{plugin}: {type(exc).__name__}: {_first_line(exc)}")
    hint = _GPL_HINT if twelve_bit_jpeg else "the compressed stream is corrupt or unsupported"
    raise RejectedFile(
        "decode-error", f"{syntax.name} pixel data did not decode ({'; '.join(failures)}); {hint}"
    )


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[:3])
    return text if len(text) <= 200 else text[:197] + "..."


def _respect_bits_stored(array: np.ndarray, module: PixelModule) -> np.ndarray:
    """Clear (unsigned) or sign-extend (signed) bits above BitsStored if a decoder left them."""
    bits = module.bits_stored
    width = array.dtype.itemsize * 8
    if bits >= width:
        return array
    if module.pixel_representation == 0:
        limit = (1 << bits) - 1
        if array.size and int(array.max()) > limit:
            array = np.bitwise_and(array, np.array(limit, dtype=array.dtype))
        return array
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if array.size and (int(array.min()) < low or int(array.max()) > high):
        shift = np.array(width - bits, dtype=array.dtype)
        array = np.right_shift(np.left_shift(array, shift), shift)
    return array


def pixel_sha256(array: np.ndarray) -> str:
    """Hex SHA-256 over 'dtype|shape|' and the little-endian C-order bytes of ``array``."""
    little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
    digest = hashlib.sha256(
        f"{little.dtype.str}|{'x'.join(str(n) for n in little.shape)}|".encode("ascii")
    )
    digest.update(memoryview(little).cast("B"))
    return digest.hexdigest()


def uid_from_sha256(hex_digest: str) -> str:
    """A DICOM UID under the UUID root 2.25 made of the first 128 bits of a SHA-256 digest."""
    return "2.25." + str(int(hex_digest[:32], 16))


# ---------------------------------------------------------------------------------- display values


def _check_rescale(ds: Dataset, notes: list[str]) -> None:
    for keyword in ("RescaleSlope", "RescaleIntercept"):
        elem = get_element(ds, keyword, required=True, notes=notes)
        if elem is None or elem.value is None or elem.value == "":
            continue
        try:
            value = float(elem.value)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value) or (keyword == "RescaleSlope" and value == 0):
            raise RejectedFile(
                "invalid-field",
                f"{keyword} must be a finite number{' other than 0' * (keyword == 'RescaleSlope')}"
                f", got {elem.value!r}",
            )


def display_pixels(
    stored: np.ndarray,
    ds: Dataset,
    module: PixelModule,
    config: ReadConfig,
    notes: list[str],
    *,
    full: np.ndarray | None = None,
) -> np.ndarray:
    """Display values in [0, 1], 0 = black: modality LUT, VOI LUT or window, MONOCHROME1 inverted.

    Without a usable VOI LUT or window the modality values are scaled by their own min and max.
    For 8- and 16-bit stored values pydicom's functions run once over every possible stored value
    and the image is a lookup into that table: the same numbers, ~10x faster on a 3.6 MP CR.
    ``full``: the full-resolution stored values when ``stored`` is a reduced copy of them; the
    values that occur (the min-max fallback) are then read from it, so both get the same scale.
    """
    _check_rescale(ds, notes)
    source = stored if full is None else full
    if stored.dtype.itemsize > 2:
        if full is None:
            return _display_values(stored, None, ds, module, config, notes)
        values = np.concatenate([stored.ravel(), [source.min(), source.max()]])
        return _display_values(values, None, ds, module, config, notes)[:-2].reshape(stored.shape)
    info = np.iinfo(stored.dtype)
    if "ModalityLUTSequence" not in ds:
        # a linear rescale is monotonic: the table over the range between the image's extremes
        # gives the same min/max fallback, and is 16x smaller than the whole domain for 12 bits
        low, high = int(source.min()), int(source.max())
        domain = np.arange(low, high + 1, dtype=np.int64).astype(stored.dtype)
        table = _display_values(domain, None, ds, module, config, notes)
        return table[stored.astype(np.int32) - low] if low else table[stored]
    # maybe not monotonic: the whole domain, with exactly the values that occur marked
    domain = np.arange(int(info.min), int(info.max) + 1, dtype=np.int64).astype(stored.dtype)
    offset = int(info.min)
    index = stored if offset == 0 else stored.astype(np.int32) - offset
    occurring = source if offset == 0 else source.astype(np.int32) - offset
    present = np.bincount(occurring.ravel(), minlength=domain.size) > 0
    table = _display_values(domain, present, ds, module, config, notes)
    return table[index]


def _display_values(
    stored: np.ndarray,
    present: np.ndarray | None,
    ds: Dataset,
    module: PixelModule,
    config: ReadConfig,
    notes: list[str],
) -> np.ndarray:
    """The display transform of ``stored``; ``present`` marks the entries that occur in the image
    (None: all), which alone count for the min-max fallback and the finiteness check."""
    try:
        values = apply_modality_lut(stored, ds)
    except Exception as exc:  # noqa: BLE001 - a malformed Modality LUT Sequence
        raise RejectedFile(
            "invalid-field", f"the modality LUT cannot be applied ({type(exc).__name__}: {exc})"
        ) from exc
    occurring = values if present is None else values[present]
    if values.dtype.kind == "f" and not np.isfinite(occurring).all():
        raise RejectedFile("invalid-field", "the modality LUT or rescale gives non-finite values")
    scaled = _apply_voi(values, ds, config, notes)
    if scaled is None:
        scaled = _scale_to_unit(values, float(occurring.min()), float(occurring.max()))
    if _inverted(ds, module, notes):
        scaled = 1.0 - scaled
    pixels = np.clip(scaled, 0.0, 1.0).astype(np.float32)
    if not np.isfinite(pixels if present is None else pixels[present]).all():
        raise RejectedFile("decode-error", "display values are not finite after the VOI transform")
    return pixels


def _apply_voi(
    values: np.ndarray, ds: Dataset, config: ReadConfig, notes: list[str]
) -> np.ndarray | None:
    has_lut = bool(get_element(ds, "VOILUTSequence", required=False, notes=notes))
    has_window = "WindowCenter" in ds and "WindowWidth" in ds
    kinds = ["lut", "window"] if config.prefer_voi_lut else ["window", "lut"]
    for kind in [k for k in kinds if (has_lut if k == "lut" else has_window)]:
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                if kind == "lut":
                    out = apply_voi(values, ds, index=0)
                    low, high = _voi_lut_range(ds)
                else:
                    out = apply_windowing(values, ds, index=0)
                    probe = apply_windowing(np.array([-1e300, 1e300]), ds, index=0)
                    low, high = float(probe.min()), float(probe.max())
            if not (math.isfinite(low) and math.isfinite(high) and high > low):
                raise ValueError(f"output range [{low}, {high}] is empty")
            return _scale_to_unit(out, low, high)
        except RecursionError:
            raise
        except Exception as exc:  # noqa: BLE001 - malformed VOI data: fall back, keep a note
            name = "VOI LUT Sequence" if kind == "lut" else "Window Center/Width"
            notes.append(f"{name} not applied ({type(exc).__name__}: {_first_line(exc)})")
    return None


def _voi_lut_table(ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Every input the first VOI LUT maps (from its descriptor) and pydicom's output for each."""
    descriptor = ds.VOILUTSequence[0].LUTDescriptor
    entries = int(descriptor[0]) or 65536
    first = int(descriptor[1])
    inputs = np.arange(first, first + entries, dtype=np.int64)
    return inputs, np.asarray(apply_voi(inputs, ds, index=0), dtype=np.float64)


def _voi_lut_range(ds: Dataset) -> tuple[float, float]:
    _, outputs = _voi_lut_table(ds)
    return float(outputs.min()), float(outputs.max())


def voi_lut_window(ds: Dataset) -> tuple[float, float]:
    """A linear (Window Center, Window Width) that spans the input range over which the first VOI
    LUT rises from its lowest to its highest output, so a linear viewer opens a LUT-only file near
    how the LUT shows it; ValueError for a flat, decreasing or unreadable LUT.

    With ``lo`` the last input still at the lowest output and ``hi`` the first input at the
    highest, the window maps ``lo`` and below to black and ``hi`` and above to white under the
    linear VOI function: c = (lo + hi + 1) / 2, w = hi - lo + 1.
    """
    inputs, outputs = _voi_lut_table(ds)
    low, high = float(outputs.min()), float(outputs.max())
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ValueError("the VOI LUT is flat: every input gives the same output")
    if outputs[-1] < outputs[0]:
        raise ValueError("the VOI LUT decreases, which no linear window can stand for")
    # the first input above the lowest output comes no later than the first at the highest, so
    # lo <= hi and the width is at least 1
    lo = int(inputs[max(int(np.flatnonzero(outputs > low)[0]) - 1, 0)])
    hi = int(inputs[int(np.flatnonzero(outputs >= high)[0])])
    return (lo + hi + 1) / 2, float(hi - lo + 1)


def _scale_to_unit(values: np.ndarray, low: float, high: float) -> np.ndarray:
    if not high > low:
        return np.zeros(values.shape, dtype=np.float32)
    out = values.astype(np.float32)
    out -= np.float32(low)
    out *= np.float32(1.0 / (high - low))
    return out


def _inverted(ds: Dataset, module: PixelModule, notes: list[str]) -> bool:
    """MONOCHROME1 shows its lowest value white; so does MONOCHROME2 with an INVERSE shape."""
    if module.photometric == "MONOCHROME1":
        return True
    shape = optional_text(ds, "PresentationLUTShape", notes)
    return shape is not None and shape.upper() == "INVERSE"


def render_for_display(
    image: object, window_center: float | None = None, window_width: float | None = None
) -> np.ndarray:
    """8-bit greyscale for a screen, from a Radiograph (or its ``pixels``) with an optional window.

    ``window_center`` and ``window_width`` are in display units, fractions of the [0, 1] range of
    ``pixels`` (center 0.5, width 1.0 shows the image unchanged); a narrower window raises contrast.
    """
    pixels = np.asarray(getattr(image, "pixels", image), dtype=np.float32)
    if pixels.ndim != 2:
        raise ValueError(f"expected a 2-D greyscale image, got shape {pixels.shape}")
    center = 0.5 if window_center is None else float(window_center)
    width = 1.0 if window_width is None else float(window_width)
    if not (math.isfinite(center) and math.isfinite(width) and width > 0):
        raise ValueError(
            f"window center {window_center!r} / width {window_width!r} must be finite with "
            "width > 0 (display units: fractions of the 0..1 range)"
        )
    scaled = (pixels - np.float32(center - width / 2)) * np.float32(255.0 / width)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
