"""Reading for ingest: decode once, then do everything else at the resolution that is used.

An encoder looks at a 224-320 pixel square and a thumbnail is 256 pixels; a CR is 2,000-3,000 pixels
a side. ``read_working_radiograph(path, config, working_side=W)`` decodes the file once, keeps the
identity of the full image (its ``pixel_sha256`` over every stored value, as ``read_radiograph``
gives it), shrinks the stored values by an integer factor ``scale`` (box averages, so the long
side stays at least ``W``) and only then applies the display transform (modality LUT, VOI LUT or
window, MONOCHROME1) to the small image. The returned :class:`~chexretrieve.dicom.Radiograph`
holds these *working* pixels, ``scale`` (source pixels per working pixel along each side) and the
metadata of the full image (its rows and columns); thumbnails and the encoders' preprocessing
start from it.

``codec="reduced"`` goes further where the codec itself can stop early: JPEG (DICOM JPEG
Baseline and JPEG files) decodes at 1/2, 1/4 or 1/8 size by DCT scaling (Pillow's ``draft``), JPEG
2000 at a lower wavelet resolution level. The full stored values are then never produced, so the
image's identity is a hash of its compressed pixel data (``encoded_sha256``): another encoding of
the same pixels counts as other pixels, and a search upload of the same file (read in full) is not
recognised as an archived copy. An archive is therefore ingested consistently with or without it.
Every other syntax (native, RLE, JPEG Lossless, JPEG-LS), and any stream the reduced decoder
refuses, takes the full decode. ``codec="gpu"`` decodes JPEG with nvJPEG on the GPU instead
(``chexretrieve.dicom.gpu_jpeg``; the same identity rule).
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile
from pydicom import uid as dicom_uid
from pydicom.dataset import Dataset
from pydicom.encaps import generate_frames

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile
from chexretrieve.dicom.images import image_display_pixels, read_image_file
from chexretrieve.dicom.pixels import (
    PixelModule,
    decode_stored_pixels,
    display_pixels,
    pixel_sha256,
    uid_from_sha256,
)
from chexretrieve.dicom.read import (
    Radiograph,
    _guarded,
    _open_checked,
    _validated_header,
    image_metadata,
)

_JPEG_SYNTAXES = frozenset({dicom_uid.JPEGBaseline8Bit})
_J2K_SYNTAXES = frozenset({dicom_uid.JPEG2000Lossless, dicom_uid.JPEG2000})


def working_scale(rows: int, columns: int, working_side: int) -> int:
    """The integer shrink factor that keeps the long side at least ``working_side`` (0: none)."""
    if working_side <= 0:
        return 1
    return max(1, max(rows, columns) // working_side)


def box_reduce(values: np.ndarray, factor: int) -> np.ndarray:
    """Mean of each ``factor`` x ``factor`` block, same dtype (integers rounded to nearest).

    The result has ``ceil(n / factor)`` rows and columns: the blocks at the right and bottom edges
    that hold fewer pixels are averaged over those they hold, so the result covers the whole image.
    """
    if factor <= 1:
        return values
    dtype = values.dtype
    if dtype.kind == "f":
        reduced = Image.fromarray(np.ascontiguousarray(values, np.float32), "F").reduce(factor)
        return np.asarray(reduced, dtype=dtype)
    if dtype.kind in "iu" and dtype.itemsize <= 2:
        image = Image.fromarray(values.astype(np.int32), "I")
        return np.asarray(image.reduce(factor)).astype(dtype)
    rows, columns = values.shape  # 32-bit integers: numpy (rare, slower)
    padded_rows, padded_columns = -(-rows // factor) * factor, -(-columns // factor) * factor
    total = np.zeros((padded_rows, padded_columns), np.float64)
    count = np.zeros_like(total)
    total[:rows, :columns] = values
    count[:rows, :columns] = 1
    shape = (padded_rows // factor, factor, padded_columns // factor, factor)
    means = total.reshape(shape).sum(axis=(1, 3)) / count.reshape(shape).sum(axis=(1, 3))
    return np.rint(means).astype(dtype)


def encoded_sha256(data: bytes, kind: str) -> str:
    """Hex SHA-256 over 'encoded|KIND|' and the compressed bytes (the reduced decode's identity)."""
    digest = hashlib.sha256(f"encoded|{kind}|".encode("ascii"))
    digest.update(data)
    return digest.hexdigest()


#: how the codec runs: every value at full size, at reduced size in the codec, or nvJPEG on the GPU
CODECS = ("full", "reduced", "gpu")


def read_working_radiograph(
    path: str | os.PathLike[str],
    config: ReadConfig | None = None,
    *,
    working_side: int,
    codec: str = "full",
) -> Radiograph:
    """The radiograph at working resolution (see the module docstring); RejectedFile as
    ``read_radiograph`` for anything unreadable. ``working_side`` 0 keeps the full resolution.
    ``codec``: "full", "reduced" (JPEG, JPEG 2000 at reduced size) or "gpu" (JPEG by nvJPEG,
    chexretrieve.dicom.gpu_jpeg); the last two identify those images by their compressed data."""
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r} is not one of {', '.join(CODECS)}")
    config = config or ReadConfig()
    return _guarded(
        Path(path), lambda p, notes: _read_working(p, config, notes, working_side, codec)
    )


def _read_working(
    path: Path, config: ReadConfig, notes: list[str], working_side: int, codec: str
) -> Radiograph:
    found, _ = _open_checked(path, config)
    if found != "dicom":
        return _read_image_working(path, found, config, notes, working_side, codec)
    ds, metadata, module = _validated_header(path, config, notes, header_only=False)
    syntax = module.transfer_syntax
    if (codec == "reduced" and syntax in (_JPEG_SYNTAXES | _J2K_SYNTAXES)) or (
        codec == "gpu" and syntax in _JPEG_SYNTAXES
    ):
        reduced = _reduced_dicom(ds, module, working_side, notes, codec)
        if reduced is not None:
            stored, scale, digest = reduced
            pixels = display_pixels(stored, ds, module, config, notes)
            return Radiograph(pixels, metadata, digest, scale=scale)
    stored = decode_stored_pixels(ds, module, config)
    digest = pixel_sha256(stored)
    scale = working_scale(module.rows, module.columns, working_side)
    reduced_values = box_reduce(stored, scale)
    full = stored if scale > 1 else None
    pixels = display_pixels(reduced_values, ds, module, config, notes, full=full)
    return Radiograph(pixels, metadata, digest, scale=scale)


def _read_image_working(
    path: Path, found: str, config: ReadConfig, notes: list[str], working_side: int, codec: str
) -> Radiograph:
    gpu = _gpu_jpeg_file(path, config, notes, working_side) if codec == "gpu" else None
    if gpu is not None:
        stored, full_shape, codec_scale = gpu
        digest = encoded_sha256(path.read_bytes(), "jpeg-file")
    elif codec == "reduced" and found == "jpeg":
        stored, full_shape, codec_scale = read_image_file(
            path, found, config, notes, draft_side=working_side
        )
        digest = encoded_sha256(path.read_bytes(), "jpeg-file")
    else:
        stored = read_image_file(path, found, config, notes)
        full_shape, codec_scale = stored.shape, 1
        digest = pixel_sha256(stored)
    scale = working_scale(*full_shape, working_side)
    extra = max(1, scale // codec_scale)
    pixels = image_display_pixels(box_reduce(stored, extra))
    metadata = image_metadata(uid_from_sha256(digest), full_shape, found)
    return Radiograph(
        pixels=pixels, metadata=metadata, pixel_sha256=digest, scale=codec_scale * extra
    )


def _gpu_jpeg_file(
    path: Path, config: ReadConfig, notes: list[str], working_side: int
) -> tuple[np.ndarray, tuple[int, int], int] | None:
    """(values, full shape, scale) of a greyscale JPEG file decoded by nvJPEG; None to read it on
    the CPU (another format or mode, over the size cap, or nvJPEG refused it)."""
    from chexretrieve.dicom.gpu_jpeg import decode_jpeg_on_gpu

    try:
        with Image.open(path) as image:
            if image.format != "JPEG" or image.mode != "L":
                return None
            columns, rows = image.size
    except Exception:  # noqa: BLE001 - the CPU reader gives the reason
        return None
    if rows * columns > config.max_pixels:
        return None
    scale = working_scale(rows, columns, working_side)
    try:
        return decode_jpeg_on_gpu(path.read_bytes(), scale), (rows, columns), scale
    except Exception as exc:  # noqa: BLE001 - a stream nvJPEG refuses: the CPU decides
        notes.append(f"GPU JPEG decode not used ({type(exc).__name__}: {exc})")
        return None


# ------------------------------------------------------------------------- reduced codec decoding


def _single_frame(ds: Dataset) -> bytes:
    frames = generate_frames(ds.PixelData, number_of_frames=1)
    frame = next(frames, None)
    if frame is None:
        raise RejectedFile("decode-error", "the encapsulated Pixel Data holds no frame")
    return frame


def _reduced_dicom(
    ds: Dataset, module: PixelModule, working_side: int, notes: list[str], codec: str
) -> tuple[np.ndarray, int, str] | None:
    """(stored values at reduced size, scale, identity) or None to take the full decode."""
    scale = working_scale(module.rows, module.columns, working_side)
    if (scale < 2 and codec == "reduced") or module.pixel_representation != 0:
        return None  # nothing to gain, or signed values the decoders would read unsigned
    if module.bits_stored > 16 or (codec == "gpu" and module.bits_allocated != 8):
        return None
    try:
        frame = _single_frame(ds)
        if codec == "gpu":
            from chexretrieve.dicom.gpu_jpeg import decode_jpeg_on_gpu

            decoded, codec_scale = decode_jpeg_on_gpu(frame, scale), scale
        elif module.transfer_syntax in _JPEG_SYNTAXES:
            decoded, codec_scale = _jpeg_reduced(frame, scale)
        else:
            decoded, codec_scale = _j2k_reduced(frame, scale)
    except RejectedFile:
        raise
    except Exception as exc:  # noqa: BLE001 - any refusal: the full decode decides
        notes.append(f"{codec} decode not used ({type(exc).__name__}: {exc})")
        return None
    expected = (-(-module.rows // codec_scale), -(-module.columns // codec_scale))
    if decoded.shape != expected:
        notes.append(f"reduced decode gave {decoded.shape}, not {expected}; decoded in full")
        return None
    dtype = np.uint8 if module.bits_allocated == 8 else np.uint16
    stored = decoded.astype(dtype, copy=False)
    limit = (1 << module.bits_stored) - 1
    if stored.size and int(stored.max()) > limit:
        stored = np.minimum(stored, np.array(limit, dtype))
    extra = max(1, scale // codec_scale)
    digest = encoded_sha256(frame, str(module.transfer_syntax))
    return box_reduce(stored, extra), codec_scale * extra, digest


def _jpeg_reduced(frame: bytes, scale: int) -> tuple[np.ndarray, int]:
    """Decode with libjpeg's DCT scaling at the largest of 1/2, 1/4, 1/8 that ``scale`` allows."""
    with Image.open(io.BytesIO(frame), formats=["JPEG"]) as image:
        if image.mode != "L":
            raise ValueError(f"JPEG stream of mode {image.mode}, not greyscale")
        columns, rows = image.size
        image.draft("L", (-(-columns // scale), -(-rows // scale)))
        image.load()
        codec_scale = _power_of_two_scale(columns, image.size[0])
        return np.asarray(image), codec_scale


def _power_of_two_scale(full: int, reduced: int) -> int:
    for scale in (1, 2, 4, 8):
        if -(-full // scale) == reduced:
            return scale
    raise ValueError(f"a side of {full} decoded to {reduced}, which is no power-of-two scale")


def _j2k_header(frame: bytes) -> tuple[int, bool, int]:
    """(precision in bits, signed, wavelet decomposition levels) of a one-component JPEG 2000
    codestream, from its SIZ and COD markers."""
    if not frame.startswith(b"\xff\x4f\xff\x51") or len(frame) < 44:
        raise ValueError("not a JPEG 2000 codestream (no SOC and SIZ markers)")
    ssiz = frame[42]  # SOC 2, SIZ marker 2, Lsiz 2, Rsiz 2, 8 sizes of 4 bytes, Csiz 2
    position = frame.find(b"\xff\x52", 4, 4096)
    if position < 0 or position + 10 > len(frame):
        raise ValueError("no COD marker in the JPEG 2000 main header")
    return (ssiz & 0x7F) + 1, bool(ssiz & 0x80), frame[position + 9]


def _j2k_reduced(frame: bytes, scale: int) -> tuple[np.ndarray, int]:
    """Decode a JPEG 2000 codestream at resolution level r (1/2**r of each side), r as large as
    both ``scale`` and the stream's decomposition levels allow.

    Pillow's own ``reduce`` attribute computes the reduced size as round(n / 2**r), openjpeg gives
    ceil(n / 2**r), and the decode fails for sides where they differ; the tile is set here with
    openjpeg's size (any failure falls back to the full decode)."""
    precision, signed, levels = _j2k_header(frame)
    if signed:
        raise ValueError("signed JPEG 2000 samples")
    level = min(levels, int(math.log2(scale)))
    with Image.open(io.BytesIO(frame), formats=["JPEG2000"]) as image:
        if image.mode not in ("L", "I;16"):
            raise ValueError(f"JPEG 2000 stream of mode {image.mode}, not one-component greyscale")
        power = 1 << level
        if level:
            columns, rows = image.size
            image._size = (-(-columns // power), -(-rows // power))  # noqa: SLF001
            tile = image.tile[0]
            args = (tile[3][0], level, image.layers, tile[3][3], tile[3][4])
            image.tile = [ImageFile._Tile(tile[0], (0, 0, *image.size), tile[2], args)]  # noqa: SLF001
        ImageFile.ImageFile.load(image)
        values = np.array(image)
    # Pillow stretches N-bit samples to its 8- or 16-bit container (pydicom's pillow plugin undoes
    # it the same way)
    shift = values.dtype.itemsize * 8 - precision
    return (np.right_shift(values, shift) if shift > 0 else values), power
