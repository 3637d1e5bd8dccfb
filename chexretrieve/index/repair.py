"""Rebuilding what failed its seal: never served, built again from the store.

A feature entry whose file does not match its seal is dropped from the index and computed again
(into a new file). A row file of the archive part that does not match (or a manifest that fails
its seal) makes the whole index be built again from the store, under new file names, while
processes still mapping the old files keep reading them until they move to the new generation.
"""

from __future__ import annotations

import copy
import logging

from chexretrieve.index.manifest import IndexUnavailable, build_lock, commit, read_manifest
from chexretrieve.index.rowfile import IndexDamaged, MappedRows, forget_verified

log = logging.getLogger(__name__)


def damaged_files(manifest) -> list[str]:
    """Logical names of the archive's row files that do not match the seal (all blocks read)."""
    bad = []
    for name in manifest.content["files"]:
        try:
            MappedRows(manifest.folder, manifest.file(name)).verify()
        except IndexDamaged as exc:
            log.warning("%s", exc)
            bad.append(name)
    return bad


def rebuild_damaged(index, entry: dict | None, progress=None) -> None:
    """Rebuild ``entry`` (a feature entry that failed its seal), else the whole index."""
    folder = index.folder
    builder = index.builder(progress)
    forget_verified()
    if entry is None:
        builder.build(anew=True)
        return
    with build_lock(folder):
        try:
            manifest = read_manifest(folder)
        except IndexUnavailable:
            manifest = None
        if manifest is not None:
            content = copy.deepcopy(manifest.content)
            names = [n for n, e in content["entries"].items() if e["file"] == entry["file"]]
            for name in names:
                content["entries"].pop(name)
            if names:
                commit(folder, content, manifest.generation)
    builder.entry(entry["finding"], entry["geometry"], entry["anchor_key"])
