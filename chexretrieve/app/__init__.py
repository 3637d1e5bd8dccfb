"""The composition root: store, encoder, anchors, audit trail and ``SearchService`` built once.

Every entry point that searches (``chexretrieve search``, the case-lookup UI, ``make demo``, the
benchmarks) calls :func:`open_search_app`, so they all open the store, load the encoder, find the
anchor sets and write the audit trail the same way: every search from any of them is audited.
"""

from chexretrieve.app.config import AppConfig
from chexretrieve.app.ports import ensure_port_free
from chexretrieve.app.root import (
    ArchiveEmptyError,
    SearchApp,
    archive_has_embeddings,
    open_search_app,
)
from chexretrieve.app.stores import DEMO_DB_FILE, resolve_read_store

__all__ = [
    "DEMO_DB_FILE",
    "AppConfig",
    "ArchiveEmptyError",
    "SearchApp",
    "archive_has_embeddings",
    "ensure_port_free",
    "open_search_app",
    "resolve_read_store",
]
