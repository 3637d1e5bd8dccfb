"""Finding the files to ingest: folders walked in a stable order, hidden entries skipped."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.ingest.config import IngestConfig

#: files with no ending that public data sets ship beside their images (MIMIC-CXR-JPG's
#: IMAGE_FILENAMES, PhysioNet's RECORDS, ...): skipped like a file with another ending, not
#: taken for an unreadable DICOM (which made `ingest --strict` fail on an intact download)
COMPANION_FILES = frozenset({"IMAGE_FILENAMES", "RECORDS", "LICENSE", "README", "SHA256SUMS"})


@dataclass(frozen=True)
class Candidate:
    """One file to ingest and the folder argument it was found under (for label matching)."""

    path: Path  # absolute
    root: Path  # the PATH argument: a folder, or the file's own folder for a file argument


@dataclass(frozen=True)
class Discovery:
    candidates: list[Candidate]
    skipped: int  # files in walked folders with another ending, or hidden


def discover_files(paths: list[str | os.PathLike[str]], config: IngestConfig) -> Discovery:
    """Every candidate file under ``paths``; a file named directly is taken whatever its ending.

    Folders are walked recursively in sorted order; entries whose name starts with '.' are skipped,
    as are files whose ending is not in ``config.extensions`` and, unless
    ``config.follow_symlinks``, symbolic links to files outside the folder. Files with no ending,
    or a numeric one (UID-named files such as ``1.2.840.113619.2.55.3.1``), are taken: DICOM
    files often look like that, except the companion files data sets ship (``COMPANION_FILES``).
    Each file appears once even if two arguments overlap.
    ValueError names a path that does not exist.
    """
    if not paths:
        raise ValueError("no paths given: name at least one folder or file to ingest")
    endings = tuple(e.lower() for e in config.extensions)
    seen: set[Path] = set()
    candidates: list[Candidate] = []
    skipped = 0
    for raw in paths:
        given = Path(raw).expanduser()
        if not given.exists():
            raise ValueError(f"{raw}: no such file or folder; check the path to ingest")
        given = given.absolute()
        if given.is_file():
            if given not in seen:
                seen.add(given)
                candidates.append(Candidate(given, given.parent))
            continue
        for folder, dirnames, filenames in os.walk(given, followlinks=config.follow_symlinks):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                path = Path(folder) / name
                wanted = not name.startswith(".") and _has_wanted_ending(name, endings)
                if not wanted or not path.is_file() or _leaves(path, given, config):
                    skipped += 1
                    continue
                if path not in seen:
                    seen.add(path)
                    candidates.append(Candidate(path, given))
    return Discovery(candidates, skipped)


def _leaves(path: Path, root: Path, config: IngestConfig) -> bool:
    """A symbolic link whose target lies outside the walked folder (unless links are followed)."""
    if config.follow_symlinks or not path.is_symlink():
        return False
    return not path.resolve().is_relative_to(root.resolve())


def _has_wanted_ending(name: str, endings: tuple[str, ...]) -> bool:
    lowered = name.lower()
    if name in COMPANION_FILES:
        return False
    if "." not in lowered or lowered.rsplit(".", 1)[1].isdigit():
        return True
    return lowered.endswith(endings)
