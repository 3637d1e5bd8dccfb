"""The one cache root of chexretrieve, and writing cache files so a reader never sees half a file.

Search features (``features/``), the evaluation's embedding caches (``eval/``) and anything else
recomputable live under one folder: ``$CHEXRETRIEVE_CACHE``, else ``$XDG_CACHE_HOME/chexretrieve``,
else ``~/.cache/chexretrieve``. Deleting it only costs recomputation.

Cache files are written under a temporary name unique to the writing process and thread, then
fsync'ed and renamed over the final name (atomic on one file system): concurrent writers of the
same entry never interleave, and a killed writer leaves a stray temporary file, never a truncated
entry.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

#: environment variable naming the cache root
CACHE_ENV = "CHEXRETRIEVE_CACHE"


def cache_root() -> Path:
    """``$CHEXRETRIEVE_CACHE``, else ``$XDG_CACHE_HOME/chexretrieve``, else ``~/.cache/...``."""
    named = os.environ.get(CACHE_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base).expanduser() / "chexretrieve"


def cache_folder(name: str) -> Path:
    """One cache's folder under the root: ``features`` (search), ``eval`` (evaluation)."""
    return cache_root() / name


def temporary_name(path: Path) -> Path:
    """A sibling of ``path`` no other process or thread writes (same suffix, for np.save)."""
    return path.with_name(f"{path.stem}.tmp{os.getpid()}-{threading.get_ident()}{path.suffix}")


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` into a unique temporary file, fsync it, then rename it to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the bytes are on disk before the name points at them
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
