"""The index's sealed manifest, its generations, the builders' lock and their journal.

A generation is one ``manifest-<generation>.json``: a seal record (``chexretrieve.seal``) of kind
``archive-index`` whose ``inputs`` hold everything about that generation (store, encoder, archive
revision, every row file with its block digests, every feature entry with its inputs and
calibrations, the density, which anchor-set version each finding is served with) and whose
``files`` name one digest per file. ``CURRENT`` names the generation readers use; a builder
writes the next manifest, then replaces ``CURRENT`` (one rename: readers see the old generation
or the new one, never a mix). Builders hold ``lock`` (an exclusive ``flock``, released by the
kernel when a builder dies, kill -9 included); readers never lock.

A build in progress records its checkpoints in ``journal.json`` (sealed too), so a build killed
at any point resumes where its last checkpoint left it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.audit.keys import fsync_folder
from chexretrieve.index.rowfile import RowFileRecord
from chexretrieve.seal import SealError, check_seal, file_digest, read_seal, seal, write_seal

#: layout version of the manifest (another version is rebuilt, never read)
FORMAT = 1
KIND = "archive-index"
JOURNAL_KIND = "archive-index-journal"
CURRENT = "CURRENT"
LOCK = "lock"
JOURNAL = "journal.json"
_MANIFEST = re.compile(r"manifest-(\d{8})\.json")


class IndexUnavailable(ValueError):
    """No usable index (none built, another store or encoder, a manifest that fails its seal)."""


@dataclass(frozen=True)
class Manifest:
    """One generation of an index folder (``content`` is the sealed dictionary)."""

    folder: Path
    generation: int
    content: dict

    @property
    def rows(self) -> int:
        return int(self.content["rows"])

    @property
    def revision(self) -> int:
        return int(self.content["revision"])

    @property
    def encoder_id(self) -> str:
        return str(self.content["encoder"]["id"])

    def file(self, name: str) -> RowFileRecord:
        return RowFileRecord.from_dict(self.content["files"][name])

    @property
    def entries(self) -> dict:
        return self.content.get("entries", {})

    @property
    def serving(self) -> dict:
        return self.content.get("serving", {})

    @property
    def fingerprint(self) -> str:
        """Changes whenever the rows' ids or embeddings change (what caches key on)."""
        return f"index-{self.file('embeddings').digest()[:12]}-{self.rows}"


def empty_content(store_label: str, encoder: dict) -> dict:
    return {
        "format": FORMAT,
        "store": store_label,
        "encoder": dict(encoder),
        "revision": 0,
        "rows": 0,
        "ids_sorted": True,
        "files": {},
        "categories": {},
        "entries": {},
        "serving": {},
        "density": None,
        "serial": 0,
    }


def _sealed_files(content: dict) -> dict[str, str]:
    """Logical file name -> digest: every row file, every entry's features, the density."""
    files = {name: RowFileRecord.from_dict(r).digest() for name, r in content["files"].items()}
    for key, entry in content.get("entries", {}).items():
        files[f"entries/{key}"] = RowFileRecord.from_dict(entry["file"]).digest()
    density = content.get("density")
    if density:
        files["density"] = density["sha256"]
    return files


def current_generation(folder: Path) -> int | None:
    try:
        name = (Path(folder) / CURRENT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IndexUnavailable(
            f"{folder}: CURRENT cannot be read ({exc.strerror or exc})"
        ) from None
    match = _MANIFEST.fullmatch(name)
    if match is None:
        raise IndexUnavailable(f"{folder}: CURRENT names {name[:60]!r}, not a manifest")
    return int(match.group(1))


def manifest_path(folder: Path, generation: int) -> Path:
    return Path(folder) / f"manifest-{generation:08d}.json"


def read_manifest(folder: Path, generation: int | None = None) -> Manifest | None:
    """The generation ``CURRENT`` names (or ``generation``); None when none was committed;
    IndexUnavailable when its seal fails or its format is another."""
    folder = Path(folder)
    if generation is None:
        generation = current_generation(folder)
        if generation is None:
            return None
    try:
        record = check_seal(read_seal(manifest_path(folder, generation)), KIND)
    except SealError as exc:
        raise IndexUnavailable(f"the index manifest in {folder} is not usable: {exc}") from None
    content = record["inputs"]
    if content.get("format") != FORMAT:
        raise IndexUnavailable(f"the index in {folder} has format {content.get('format')!r}")
    if record["files"] != _sealed_files(content):
        raise IndexUnavailable(f"the index manifest in {folder} names other files than it seals")
    return Manifest(folder, generation, content)


def commit(folder: Path, content: dict, previous: int | None) -> Manifest:
    """Write ``content`` as the next generation and make it current (call under ``lock``);
    generations older than the one before are deleted with the files only they used."""
    folder = Path(folder)
    generation = (previous or 0) + 1
    record = seal(KIND, _sealed_files(content), content)
    write_seal(manifest_path(folder, generation), record)
    tmp = folder / f".{CURRENT}.tmp{os.getpid()}"
    tmp.write_text(manifest_path(folder, generation).name + "\n", encoding="utf-8")
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, folder / CURRENT)
    fsync_folder(folder)
    collect_garbage(folder, keep=(generation, previous))
    return Manifest(folder, generation, json.loads(json.dumps(content)))


def referenced_files(content: dict) -> set[str]:
    names = {r["file"] for r in content["files"].values()}
    names |= {e["file"]["file"] for e in content.get("entries", {}).values()}
    if content.get("density"):
        names.add(content["density"]["file"])
    return names


def collect_garbage(folder: Path, keep: tuple) -> None:
    """Delete manifests other than ``keep`` and data files none of those references (a process
    still mapping a deleted file keeps reading it: unlinking never cuts a mapping short)."""
    kept: set[str] = set()
    for path in folder.glob("manifest-*.json"):
        match = _MANIFEST.fullmatch(path.name)
        if match is None:
            continue
        generation = int(match.group(1))
        if generation in keep:
            with contextlib.suppress(IndexUnavailable, KeyError, TypeError):
                manifest = read_manifest(folder, generation)
                if manifest is not None:
                    kept |= referenced_files(manifest.content)
        else:
            path.unlink(missing_ok=True)
    journal = read_journal(folder)
    if journal is not None:  # the files a build in progress resumes from
        if "content" in journal:
            kept |= referenced_files(journal["content"])
        if "entry" in journal:
            kept.add(journal["entry"]["file"]["file"])
    for sub in ("rows", "features", "density"):
        for path in (folder / sub).rglob("*"):
            if path.is_file() and path.relative_to(folder).as_posix() not in kept:
                path.unlink(missing_ok=True)


@contextlib.contextmanager
def build_lock(folder: Path, wait: bool = True) -> Iterator[bool]:
    """The folder's builder lock (yields False when ``wait`` is off and another holds it)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ journal
def write_journal(folder: Path, journal: dict) -> None:
    write_seal(Path(folder) / JOURNAL, seal(JOURNAL_KIND, {}, journal))


def read_journal(folder: Path) -> dict | None:
    """The sealed checkpoints of an unfinished build, or None (none, or not sealed by us)."""
    path = Path(folder) / JOURNAL
    if not path.exists():
        return None
    try:
        return check_seal(read_seal(path), JOURNAL_KIND)["inputs"]
    except SealError:
        return None


def clear_journal(folder: Path) -> None:
    (Path(folder) / JOURNAL).unlink(missing_ok=True)


def density_digest(path: Path) -> str:
    return file_digest(path)
