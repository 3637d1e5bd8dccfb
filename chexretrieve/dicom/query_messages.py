"""Why an uploaded or given query image was refused, in the words of a query (no Gradio).

The reader's messages are written for an archive being ingested ("remove it from the archive");
someone who dropped one file into the page needs to hear what is wrong with *that file* and what
to upload instead.
"""

from __future__ import annotations

#: reason code of chexretrieve.dicom.RejectedFile -> what it means for an uploaded file
UPLOAD_REASONS = {
    "unreadable": "could not be read on the server",
    "empty-file": "is empty (0 bytes): the copy or the export failed",
    "not-dicom": "is not a DICOM, PNG or JPEG image",
    "unsupported-format": "is in a format or encoding that cannot be read",
    "corrupt": "is a damaged DICOM file",
    "truncated": "is cut short: it ends before its image data does",
    "too-large": "is larger than the server reads",
    "too-deep": "has a DICOM structure nested too deeply to be a radiograph",
    "non-image-object": "holds no image (a report, structure set or other non-image object)",
    "no-pixel-data": "is a DICOM file without image pixels",
    "multi-frame": "holds several frames; upload a single radiograph",
    "modality": "is not a radiograph (its DICOM modality is not CR or DX)",
    "for-processing": "holds raw detector data ('FOR PROCESSING'); upload the version for display",
    "photometric": "is a colour image; upload a greyscale radiograph",
    "missing-field": "lacks a DICOM element needed to show it",
    "invalid-field": "has a DICOM element with an unusable value",
    "decode-error": "holds image data that could not be decoded",
}
#: phrases of the reader's archive-oriented advice that an upload message leaves out
_ARCHIVE_ADVICE = ("archive", "ingest", "ReadConfig")


def upload_message(
    file_name: str,
    reason: str,
    detail: str,
    subject: str = "The uploaded file",
    advice: str = "upload a DICOM, PNG or JPEG chest radiograph",
) -> str:
    """ "The uploaded file 'notes.dcm' is not a DICOM, PNG or JPEG image: <the reader's
    diagnosis>. Nothing was searched; upload ...": the diagnosis without its advice about the
    archive (``subject`` and ``advice`` name the file and what to do, e.g. for `search --image`)."""
    what = UPLOAD_REASONS.get(reason, "could not be read as a radiograph")
    text = detail.split(": ", 1)[1] if detail.startswith(f"{file_name}: ") else detail
    kept = [
        part.strip()
        for part in text.split(";")
        if part.strip() and not any(word in part for word in _ARCHIVE_ADVICE)
    ]
    diagnosis = f": {'; '.join(kept)}" if kept else ""
    return f"{subject} {file_name!r} {what}{diagnosis}. Nothing was searched; {advice}."
