"""Where a store's archive index lives.

A SQLite store's index sits beside its file: ``archive.sqlite`` -> ``archive.index/``. Another
database (PostgreSQL) has no file to sit beside: its index lives in ``IndexConfig.folder``, else
``$CHEXRETRIEVE_INDEX``, else ``index/`` under the cache root, in a sub-folder named after the
store (the same URL on every node: several nodes share one index folder, a network mount).
Inside, one folder per encoder: ``<encoder slug>-<hash>/``.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from chexretrieve.cache import cache_folder
from chexretrieve.index.config import INDEX_ENV, IndexConfig


def _slug(text: str, length: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:length]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def index_root(store_label: str, sqlite_path: Path | None, config: IndexConfig) -> Path:
    """The index folder of a store (see the module text); ``sqlite_path``: its file, if any."""
    if config.folder is not None:
        return Path(config.folder).expanduser()
    if sqlite_path is not None:
        return Path(sqlite_path).with_suffix(".index")
    named = os.environ.get(INDEX_ENV, "").strip()
    base = Path(named).expanduser() if named else cache_folder("index")
    return base / f"{_slug(store_label.split('/')[-1] or 'store', 24)}-{_digest(store_label)}"


def encoder_folder(root: Path, encoder_id: str) -> Path:
    """The folder of one encoder's index inside a store's index folder."""
    return Path(root) / f"{_slug(encoder_id)}-{_digest(encoder_id)}"
