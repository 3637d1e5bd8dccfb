"""The archive index: what searching an archive needs, built at ingest, mapped by every reader.

Between ``chexretrieve.store`` (the database: the truth) and ``chexretrieve.search`` (the
service): per store, encoder and archive revision, the gallery's columns and embeddings as
memory-mappable files; per (finding, served anchor-set version, geometry) the feature matrix
(float16 by default) and its rank calibrations; the archive density; and a sealed manifest.
``serve``, ``search`` and ``eval`` map these files instead of reading the gallery from the
database: a page answers without reading the archive into Python objects, a search scans the
feature file in place, and several server processes share the same pages of memory.

Layout of one index (``<store>.index/`` beside a SQLite store, see ``paths``)::

    <encoder slug>-<hash>/            one per encoder
      CURRENT                         names the current manifest (replaced atomically)
      manifest-00000042.json          a generation: sealed content (see ``manifest``)
      lock                            builders' flock
      journal.json                    checkpoints of a build in progress (sealed)
      rows/image_ids.0001.npy         int64 (n,)           image ids, row order
      rows/embeddings.0002.npy        float32 (n, d)       the encoder's unit embeddings
      rows/study_ids.0003.npy         int64 (n,)           study of each row (own-study exclusion)
      rows/labels.0004.npy            int8 (n, 13)         1 / 0 / -1, -2 blank, -3 unlabelled
      rows/meta/<column>.NNNN.npy     one per metadata column (``columns``: codes, text, numbers)
      features/<finding>/<geometry>-<fit>.NNNN.npy
                                      float16 (n, F padded to 8/16) one geometry's features
      density/density.NNNN.npz        the archive density (ArchiveDensity.save)

Every per-row file is a plain ``.npy`` (``np.load(path, mmap_mode="r")``), row i of every file
being the same image; rows are read only up to the count the manifest commits (a file can hold
more while a build appends). The manifest (a ``chexretrieve.seal`` record) lists each file with
the SHA-256 of every block of about 1 MB of its rows, the inputs of every entry (anchor-set
content hash, geometry, fit seed, inverse temperature, prior hash, dtype), the calibrations'
inputs, the density's SHA-256, and which anchor-set version each finding is served with.
Readers verify each block before they use it, once per process (``rowfile``); a file that fails
is rebuilt (``repair``), never served. Shard ``k`` of ``K`` of an index is rows
``[k n / K, (k + 1) n / K)`` of every per-row file.

Building (``builder``): ``chexretrieve index build``, the end of ``ingest``, a curator's
publication or revert (the new version replaces the old one in one generation switch once it is
complete), and in ``serve`` a first use of another (finding, geometry) (``jobs``). Updates read
only the images the store's change log names since the indexed revision.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from chexretrieve.index.config import INDEX_ENV, IndexConfig  # INDEX_ENV: non-SQLite stores

if TYPE_CHECKING:
    from chexretrieve.index.builder import IndexBuilder
    from chexretrieve.index.gallery import IndexGallery
    from chexretrieve.index.handle import ArchiveIndex
    from chexretrieve.index.manifest import IndexUnavailable, Manifest, read_manifest
    from chexretrieve.index.rowfile import IndexDamaged

__all__ = [
    "INDEX_ENV",
    "ArchiveIndex",
    "IndexBuilder",
    "IndexConfig",
    "IndexDamaged",
    "IndexGallery",
    "IndexUnavailable",
    "Manifest",
    "index_folder",
    "read_manifest",
]

#: name -> module it lives in (imported on first use: `chexretrieve.index.config` stays light
#: for the settings every command builds)
_LAZY = {
    "ArchiveIndex": "handle",
    "IndexBuilder": "builder",
    "IndexDamaged": "rowfile",
    "IndexGallery": "gallery",
    "IndexUnavailable": "manifest",
    "Manifest": "manifest",
    "read_manifest": "manifest",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"chexretrieve.index.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'chexretrieve.index' has no attribute {name!r}")


def index_folder(store, encoder_id: str, config: IndexConfig | None = None) -> Path:
    """The folder of ``store``'s index of ``encoder_id`` (see ``chexretrieve.index.paths``)."""
    from chexretrieve.index.paths import encoder_folder, index_root
    from chexretrieve.store import sqlite_file

    root = index_root(store.label, sqlite_file(store.config.url), config or IndexConfig())
    return encoder_folder(root, encoder_id)
