"""Why a file was not read: :class:`RejectedFile` and its stable reason codes."""

from __future__ import annotations

#: Every reason code :class:`RejectedFile` can carry, with what it means. Codes are stable: ingest
#: reports count them and tests assert them.
REJECTION_REASONS: dict[str, str] = {
    "unreadable": "the file could not be opened or read (missing, a folder, no permission)",
    "empty-file": "the file has zero bytes",
    "not-dicom": "the content is not DICOM (or not the format its name promises)",
    "unsupported-format": "a format, transfer syntax or pixel encoding that is not read",
    "corrupt": "the DICOM structure cannot be parsed at all",
    "truncated": "the file ends before the data its header announces",
    "too-large": "the file or the image exceeds the configured size cap",
    "too-deep": "sequences nested deeper than the configured limit",
    "non-image-object": "not an image: SR, RT, DICOMDIR, presentation state, ...",
    "no-pixel-data": "a DICOM image object without (7FE0,0010) Pixel Data",
    "multi-frame": "more than one frame; only single radiographs are read",
    "modality": "a modality outside ReadConfig.allowed_modalities",
    "for-processing": "a DX 'FOR PROCESSING' object (raw detector data, not for display)",
    "photometric": "colour or palette pixels; only MONOCHROME1/MONOCHROME2 greyscale is read",
    "missing-field": "a required element is absent",
    "invalid-field": "an element we rely on has a wrong value, type or VR",
    "decode-error": "pixel decoding failed (codec missing, corrupt stream, unexpected error)",
}


class RejectedFile(ValueError):
    """A file that cannot be read as a radiograph.

    ``reason`` is one of :data:`REJECTION_REASONS` (a short stable code for counting); ``message``
    says what is wrong with the file and what to do about it.
    """

    def __init__(self, reason: str, message: str) -> None:
        if reason not in REJECTION_REASONS:
            raise ValueError(
                f"unknown rejection reason {reason!r}; known: {sorted(REJECTION_REASONS)}"
            )
        super().__init__(f"[{reason}] {message}")
        self.reason = reason
        self.message = message

    def __reduce__(self):  # keep reason and message when pickled across worker processes
        return (type(self), (self.reason, self.message))
