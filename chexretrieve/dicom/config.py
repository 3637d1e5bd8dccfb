"""Settings for reading radiographs (DICOM, PNG, JPEG)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadConfig:
    """How tolerant and how strict :func:`chexretrieve.dicom.read_radiograph` is."""

    # DICOM Modality values that are read; others are rejected ('modality'). None admits every
    # modality, including a missing one. PNG/JPEG files carry no modality and skip this check.
    allowed_modalities: tuple[str, ...] | None = ("CR", "DX")
    # File formats read at all: any of "dicom", "png", "jpeg" ('unsupported-format' otherwise)
    allowed_formats: tuple[str, ...] = ("dicom", "png", "jpeg")
    # Largest Rows x Columns accepted, checked from the header before any pixel is decoded
    max_pixels: int = 60_000_000
    # Largest file size in bytes that is opened at all ('too-large' above it)
    max_file_bytes: int = 1 << 30
    # Deepest sequence nesting accepted ('too-deep' beyond it; real images use fewer than 10 levels)
    max_sequence_depth: int = 32
    # Admit DX/MG 'FOR PROCESSING' objects (raw detector data that is not meant for display)
    allow_for_processing: bool = False
    # With both a VOI LUT Sequence and Window Center/Width, apply the LUT (False: the window)
    prefer_voi_lut: bool = True
    # pydicom decoding plugins to try first, in order (others available follow in pydicom's order);
    # empty keeps pydicom's order (gdcm, then pylibjpeg / pillow / pydicom's own RLE decoder)
    decoding_plugins: tuple[str, ...] = ()
    # Largest channel difference (0-255 scale) for which a colour PNG/JPEG counts as grey
    grey_tolerance: int = 8

    def __post_init__(self) -> None:
        if self.max_pixels <= 0:
            raise ValueError(f"ReadConfig.max_pixels must be positive, got {self.max_pixels}")
        if self.max_file_bytes <= 0:
            raise ValueError(
                f"ReadConfig.max_file_bytes must be positive, got {self.max_file_bytes}"
            )
        if self.max_sequence_depth < 1:
            raise ValueError(
                f"ReadConfig.max_sequence_depth must be at least 1, got {self.max_sequence_depth}"
            )
        unknown = set(self.allowed_formats) - {"dicom", "png", "jpeg"}
        if unknown:
            raise ValueError(
                f"ReadConfig.allowed_formats has unknown formats {sorted(unknown)}; "
                "use any of 'dicom', 'png', 'jpeg'"
            )
        if self.allowed_modalities is not None:
            if isinstance(self.allowed_modalities, str):
                raise ValueError(
                    "ReadConfig.allowed_modalities must be a tuple of codes such as ('CR', 'DX'), "
                    f"not the string {self.allowed_modalities!r}"
                )
            normalised = tuple(m.strip().upper() for m in self.allowed_modalities)
            object.__setattr__(self, "allowed_modalities", normalised)
        if not 0 <= self.grey_tolerance <= 255:
            raise ValueError(
                f"ReadConfig.grey_tolerance must be in 0..255, got {self.grey_tolerance}"
            )
