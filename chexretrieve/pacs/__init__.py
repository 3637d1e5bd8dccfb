"""PACS ingest over DICOMweb: QIDO searches, WADO retrieval, resumable, per-study completeness.

``ingest_dicomweb(DicomWebConfig(url=...), store, encoder)`` is the library entry point;
``chexretrieve ingest --dicomweb URL`` the command line. dicomweb-client and requests are imported
only here; DICOM bytes are handled by ``chexretrieve.dicom``.
"""

from chexretrieve.pacs.config import DicomWebConfig

__all__ = ["DicomWebConfig"]
