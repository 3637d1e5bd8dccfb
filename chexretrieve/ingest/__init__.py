"""Ingest: walk an archive, decode in worker processes, embed in batches, store resumably.

``ingest_paths(paths, store, encoder, IngestConfig(...))`` is the library entry point;
``chexretrieve ingest`` (``chexretrieve.app.ingest_commands``, which also dispatches to the PACS
and Ray paths) is the command line. Names are imported
lazily so that ``chexretrieve --help`` does not load SQLAlchemy or pandas.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "IngestConfig": "chexretrieve.ingest.config",
    "LabelTable": "chexretrieve.ingest.labels",
    "read_label_csv": "chexretrieve.ingest.labels",
    "IngestError": "chexretrieve.ingest.pipeline",
    "IngestReport": "chexretrieve.ingest.pipeline",
    "ingest_paths": "chexretrieve.ingest.pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):  # noqa: ANN202
    if name not in _EXPORTS:
        raise AttributeError(f"module 'chexretrieve.ingest' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
