"""Why an upload was refused, in the words of an upload: see
:mod:`chexretrieve.dicom.query_messages` (shared with `chexretrieve search --image`)."""

from __future__ import annotations

from chexretrieve.dicom.query_messages import UPLOAD_REASONS, upload_message

__all__ = ["UPLOAD_REASONS", "upload_message"]
