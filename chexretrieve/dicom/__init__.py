"""Reading radiographs: the only package that imports pydicom.

``read_radiograph(path, ReadConfig())`` reads a DICOM, PNG or JPEG file into a :class:`Radiograph`
(display-ready float32 pixels in [0, 1], validated :class:`RadiographMetadata`, a pixel hash) or
raises :class:`RejectedFile` whose ``reason`` is one of :data:`REJECTION_REASONS`.
``read_pixel_values(path)`` gives a viewer the image in its own value units with its default DICOM
window, and ``linear_window`` applies a window by the DICOM linear VOI function.
"""

from chexretrieve.dicom.codec_setup import GDCM_AVAILABLE  # first: guards gdcm's `import dl`
from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import REJECTION_REASONS, RejectedFile
from chexretrieve.dicom.fields import list_text_fields
from chexretrieve.dicom.metadata import RadiographMetadata, parse_age_string, parse_date
from chexretrieve.dicom.pixels import pixel_sha256, render_for_display, uid_from_sha256
from chexretrieve.dicom.read import (
    Radiograph,
    pydicom_test_file,
    read_dicom_header,
    read_radiograph,
    sniff_format,
)
from chexretrieve.dicom.thumbnails import DEFAULT_THUMBNAIL_PX, thumbnail_pixels, thumbnail_png
from chexretrieve.dicom.viewing import PixelValues, linear_window, read_pixel_values

__all__ = [
    "DEFAULT_THUMBNAIL_PX",
    "GDCM_AVAILABLE",
    "PixelValues",
    "REJECTION_REASONS",
    "Radiograph",
    "RadiographMetadata",
    "ReadConfig",
    "RejectedFile",
    "linear_window",
    "list_text_fields",
    "parse_age_string",
    "parse_date",
    "pixel_sha256",
    "pydicom_test_file",
    "read_dicom_header",
    "read_pixel_values",
    "read_radiograph",
    "render_for_display",
    "sniff_format",
    "thumbnail_pixels",
    "thumbnail_png",
    "uid_from_sha256",
]
