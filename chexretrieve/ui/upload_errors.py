"""Why an upload was refused, in the words of an upload (see
:mod:`chexretrieve.dicom.query_messages`, shared with `chexretrieve search --image`), and how
an upload is named on screen."""

from __future__ import annotations

from chexretrieve.dicom.query_messages import UPLOAD_REASONS, upload_message

__all__ = ["UPLOAD_REASONS", "upload_message", "upload_name"]

#: longest uploaded file name shown (a longer one is cut in the middle)
MAX_SHOWN_NAME = 60


def upload_name(file_name: str) -> str:
    """How an upload is named on screen: by its file name, so that after several uploads the
    query is still known by name ("upload chest-pa.dcm")."""
    name = " ".join(str(file_name).split()) or "(no name)"
    if len(name) > MAX_SHOWN_NAME:
        half = (MAX_SHOWN_NAME - 1) // 2
        name = name[:half] + "…" + name[-half:]
    return f"upload {name}"
