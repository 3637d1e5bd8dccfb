"""A size bound on deflate-compressed DICOM datasets, checked before pydicom inflates one.

pydicom inflates a Deflated Explicit VR Little Endian body in one ``zlib.decompress`` call, with no
limit: a few megabytes of deflate stream can claim gigabytes. Here the body is inflated in bounded
pieces and discarded while its element headers are walked: an element whose declared length runs
past the cap is rejected at once (before its value is inflated), and the inflated total is counted
so that no stream, however its lengths are declared, gets past the cap either.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from pydicom.filereader import _read_file_meta_info, read_preamble
from pydicom.uid import DeflatedExplicitVRLittleEndian

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile

#: room for the non-pixel elements of an inflated dataset on top of the largest pixel data
_HEADER_ALLOWANCE = 16 << 20
_READ_BYTES = 1 << 20
_STEP_BYTES = 4 << 20
_UNDEFINED = 0xFFFFFFFF
_LONG_VRS = frozenset({b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN",
                       b"UR", b"UT", b"UV"})  # fmt: skip


def inflated_body_limit(config: ReadConfig) -> int:
    """Most bytes an inflated dataset may hold: the largest image at 32 bits per pixel plus a
    header allowance, and never more than ``max_file_bytes``."""
    return min(config.max_file_bytes, 4 * config.max_pixels + _HEADER_ALLOWANCE)


class _TooLarge(Exception):
    """Raised inside the walk; the message says which bound was passed."""


class _Inflater:
    """Inflates a raw deflate stream on demand, never holding more than a few MiB."""

    def __init__(self, handle, limit: int) -> None:  # noqa: ANN001
        self._handle = handle
        self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        self._buffer = b""
        self._offset = 0  # first unconsumed byte of the buffer
        self.limit = limit
        self.position = 0  # inflated bytes consumed so far

    def _available(self) -> int:
        return len(self._buffer) - self._offset

    def _more(self) -> bool:
        if self._zlib.eof:
            return False
        data = self._zlib.unconsumed_tail or self._handle.read(_READ_BYTES)
        if not data:
            return False
        self._buffer = self._buffer[self._offset :] + self._zlib.decompress(data, _STEP_BYTES)
        self._offset = 0
        if self.position + len(self._buffer) > self.limit:
            raise _TooLarge(f"the dataset inflates to more than {self.limit:,} bytes")
        return True

    def read(self, n: int) -> bytes:
        while self._available() < n and self._more():
            pass
        out = self._buffer[self._offset : self._offset + n]
        self._offset += len(out)
        self.position += len(out)
        return out

    def skip(self, n: int) -> None:
        if self.position + n > self.limit:  # the declared length alone runs past the cap
            raise _TooLarge(f"an element declares {n:,} bytes, past the {self.limit:,} allowed")
        while n > 0:
            if not self._available() and not self._more():
                return
            taken = min(n, self._available())
            self._offset += taken
            self.position += taken
            n -= taken


def _walk(stream: _Inflater, pixel_limit: int) -> None:
    """Element headers in file order; defined-length values are skipped, undefined-length ones
    (sequences, encapsulated pixel data) are walked into. Pixel Data may hold ``pixel_limit``
    bytes, everything else together (headers, other values, anything unparseable that follows)
    ``_HEADER_ALLOWANCE``."""
    header_bytes = 0
    pixel_bytes = 0
    in_encapsulated = False
    while True:
        start = stream.position
        head = stream.read(8)
        if len(head) < 8:
            return
        group, element, vr = struct.unpack("<HH2s", head[:6])
        if group == 0xFFFE:  # item or delimiter: a 4-byte length and no VR
            length = struct.unpack("<I", head[4:8])[0]
            if element == 0xE0DD:
                in_encapsulated = False
        elif vr in _LONG_VRS:
            length = struct.unpack("<I", stream.read(4).rjust(4, b"\0"))[0]
        elif vr.isalpha() and vr.isupper():
            length = struct.unpack("<H", head[6:8])[0]
        else:  # not an element header: the rest counts against the non-pixel allowance
            stream.skip(_HEADER_ALLOWANCE - header_bytes + 1)
            _check_header_bytes(header_bytes + stream.position - start)
            return
        is_pixel_data = (group, element) == (0x7FE0, 0x0010)
        header_bytes += stream.position - start
        if length == _UNDEFINED:
            in_encapsulated = in_encapsulated or is_pixel_data
        elif is_pixel_data or in_encapsulated:
            pixel_bytes += length
            if pixel_bytes > pixel_limit:
                raise _TooLarge(f"Pixel Data declares more than {pixel_limit:,} bytes")
        else:
            header_bytes += length
        _check_header_bytes(header_bytes)
        if length != _UNDEFINED:
            stream.skip(length)


def _check_header_bytes(count: int) -> None:
    if count > _HEADER_ALLOWANCE:
        raise _TooLarge(f"it holds more than {_HEADER_ALLOWANCE:,} bytes besides Pixel Data")


def check_deflated_size(path: Path, config: ReadConfig) -> None:
    """RejectedFile('too-large') when a deflated dataset inflates, or declares elements that would
    inflate, past the limit; a file that is not a readable deflated one is left for the full read
    to report."""
    with path.open("rb") as handle:
        try:
            read_preamble(handle, True)
            meta = _read_file_meta_info(handle)
        except Exception:  # noqa: BLE001 - the full read names the problem
            return
        if meta.get("TransferSyntaxUID") != DeflatedExplicitVRLittleEndian:
            return
        limit = inflated_body_limit(config)
        try:
            _walk(_Inflater(handle, limit), min(4 * config.max_pixels, limit))
        except zlib.error:
            return
        except _TooLarge as exc:
            raise RejectedFile(
                "too-large",
                f"deflate-compressed dataset too large once inflated: {exc} (bounds from "
                "ReadConfig.max_pixels and max_file_bytes); a decompression bomb or a corrupt file",
            ) from None
