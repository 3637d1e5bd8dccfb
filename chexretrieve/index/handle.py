"""``ArchiveIndex``: the archive index as the search service reads it, in `serve` or a command.

It hands the service the current generation's gallery (``gallery``; a new generation is picked
up at the next search: ``revision_token`` changes when ``CURRENT`` does), the features of an
indexed (finding, geometry) mapped in place (``features``), stored rank calibrations
(``calibration``) and which anchor-set version serves each finding (``serving_key``). What the
index lacks is prepared:

* in a small archive (``IndexConfig.prepare_in_request_below``) during the request, into the
  index when the folder is writable (else the service computes it in memory, as without one);
* in `serve` (``background=True``) by a background job (``chexretrieve.index.jobs``), the
  search meanwhile answering "being prepared (n %)" (``FeaturesBeingPrepared``);
* in a one-shot command, during the call.

A store whose revision moved past the index (an ingest that did not update it) gets the index
updated: in the background in `serve`, at open in a command.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from chexretrieve.index.builder import IndexBuilder
from chexretrieve.index.config import IndexConfig
from chexretrieve.index.entries import entry_key, entry_keys
from chexretrieve.index.gallery import IndexGallery
from chexretrieve.index.manifest import CURRENT, IndexUnavailable, Manifest, read_manifest
from chexretrieve.index.rowfile import IndexDamaged
from chexretrieve.search.foreground import FOREGROUND
from chexretrieve.search.requests import FeaturesBeingPrepared

log = logging.getLogger(__name__)

#: seconds between two checks, in `serve`, that the store has not moved past the index
STORE_CHECK_S = 5.0


class ArchiveIndex:
    """One store's and encoder's index folder, read by a search service (see module text)."""

    def __init__(
        self,
        folder: Path,
        store,
        encoder_id: str,
        anchors,
        config: IndexConfig | None = None,
        search=None,
        density=None,
        background: bool = False,
    ):
        self.folder = Path(folder)
        self.store = store
        self.encoder_id = encoder_id
        self.anchors = anchors
        self.config = config or IndexConfig()
        self.search = search
        self.density_config = density
        self.background = background
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._manifest: Manifest | None = None
        self._gallery: IndexGallery | None = None
        self._keys: dict[tuple, object] = {}
        self._store_checked = 0.0
        self.jobs = None
        if background:
            from chexretrieve.index.jobs import IndexJobs

            self.jobs = IndexJobs(self)

    # ------------------------------------------------------------------------ builders
    @property
    def writable(self) -> bool:
        """Whether this process may build into the folder (or create it)."""
        folder = self.folder
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        return os.access(folder, os.W_OK)

    def builder(self, progress=None) -> IndexBuilder:
        return IndexBuilder(self.folder, self.store, self.encoder_id, self.anchors, self.config,
                            self.search, self.density_config, progress)  # fmt: skip

    def open(self, build: bool = True, progress=None) -> Manifest | None:
        """The current generation, built or brought up to the store first when ``build`` and
        the folder is writable (a missing index is built in full: minutes for a large one)."""
        manifest = self._read()
        if build and self.writable:
            behind = manifest is None or self._store_revision() != manifest.revision
            if behind:
                if manifest is None:
                    self.builder(progress).build()
                else:
                    self.builder(progress).update()
                manifest = self._read(force=True)
        return manifest

    def _store_revision(self) -> int:
        return int(self.store.archive_revision())

    # -------------------------------------------------------------------- generations
    def _read(self, force: bool = False) -> Manifest | None:
        """The current manifest, read again only when CURRENT changed."""
        try:
            info = os.stat(self.folder / CURRENT)
            stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if not force and stamp == self._stamp and self._manifest is not None:
                return self._manifest
        try:
            manifest = read_manifest(self.folder) if stamp is not None else None
        except IndexUnavailable as exc:
            log.warning("%s", exc)
            manifest = None
        if manifest is not None and manifest.encoder_id != self.encoder_id:
            manifest = None
        with self._lock:
            self._stamp, self._manifest = stamp, manifest
        return manifest

    def manifest(self) -> Manifest | None:
        """The current generation, brought up to the store when the store moved past it: in
        `serve` by a background update (checked every STORE_CHECK_S seconds; the next search
        after it sees the new cases), in a command before the search (one query per search)."""
        manifest = self._read()
        if manifest is None or not self.writable:
            return manifest
        now = time.monotonic()
        if self.jobs is not None and now - self._store_checked <= STORE_CHECK_S:
            return manifest
        self._store_checked = now
        try:
            behind = self._store_revision() != manifest.revision
        except Exception as exc:  # noqa: BLE001 - the service's own revision read says it
            log.warning("cannot compare the index with the store: %s", exc)
            return manifest
        if behind and self.jobs is not None:
            self.jobs.update()
        elif behind:
            self.builder().update()
            manifest = self._read(force=True)
        return manifest

    def revision_token(self) -> int:
        """Changes whenever another generation becomes current (the service reloads then)."""
        manifest = self.manifest()
        return -1 if manifest is None else manifest.generation

    def gallery(self) -> IndexGallery:
        try:
            return self._open_gallery()
        except IndexDamaged:
            if self.jobs is not None:  # `serve`: rebuilt in the background meanwhile
                raise
            return self._open_gallery()  # a command rebuilt it during the failed open

    def _open_gallery(self) -> IndexGallery:
        manifest = self.manifest()
        if manifest is None:
            raise IndexUnavailable(
                f"the archive index in {self.folder} is not built; run `chexretrieve index "
                "build --db URL --encoder SPEC` (ingest builds it)"
            )
        with self._lock:
            gallery = self._gallery
        if gallery is not None and gallery.manifest.generation == manifest.generation:
            return gallery
        gallery = IndexGallery(manifest, on_damage=self._damaged)
        if self.config.verify == "all":
            verify_all(gallery)
        else:
            gallery.verify_small()
        with self._lock:
            self._gallery = gallery
        if self.background:  # `serve`: the large files are checked before the first searches
            gallery.verifying_in_background = True
            threading.Thread(target=self._warm, args=(gallery,), daemon=True,
                             name="chexretrieve-index-verify").start()  # fmt: skip
        return gallery

    def _warm(self, gallery: IndexGallery) -> None:
        """Verify (and map) what every search reads in full: the embeddings (nearest-neighbour
        note of the case lookup), then each finding's served features. The thread runs at a
        lower CPU priority than the server's requests: a search that needs a block not yet
        verified checks it itself, at its own priority, rather than waiting behind this."""
        lower_thread_priority()
        try:
            with FOREGROUND.yielding():  # each block waits while searches run
                self._check_served(gallery)
        except Exception as exc:  # noqa: BLE001 - a search meets the same problem and says it
            log.warning("checking the index in the background: %s", exc)

    def _check_served(self, gallery: IndexGallery) -> None:
        manifest = gallery.manifest
        for name, entry in manifest.entries.items():  # what a first search scans
            served = manifest.serving.get(entry["finding"]) == entry["anchor_key"]
            if served and int(entry["file"]["rows"]) == len(gallery):
                self._mapped(name, entry)
        gallery.embedding_keys()  # the case lookup's nearest-neighbour note

    def _damaged(self, exc: IndexDamaged) -> None:
        """A row file of the archive failed its seal: never served; the index is rebuilt (in
        the background in `serve`, now in a command: the caller then searches again)."""
        log.warning("%s", exc)
        with self._lock:
            self._gallery = None
        self.repair(None)

    # ------------------------------------------------------------------ what a search reads
    def serving_key(self, finding: str) -> str | None:
        manifest = self._read()
        return None if manifest is None else manifest.serving.get(finding)

    def served_entry(self, gallery, key: str):
        """(name, manifest entry) of the features fitted as ``key`` for ``gallery``'s rows
        (from a newer generation with the same rows when the gallery's lacks it); (None, None)
        for a gallery not read from the index, (name, None) when none is built."""
        manifest = getattr(gallery, "manifest", None)
        if manifest is None:
            return None, None
        name = entry_key(key, self.config.feature_dtype)
        entry = manifest.entries.get(name)
        if entry is None or int(entry["file"]["rows"]) != len(gallery):
            current = self._read()
            if current is not None and current.rows == len(gallery):
                entry = current.entries.get(name)  # added by a newer generation, same rows
        return name, entry

    def features(self, gallery, geometry, key, spec, anchor_set):
        """The indexed features (a KeyMatrix over the file) of the geometry fitted as ``key``
        for ``gallery``'s rows; None when the service should compute them itself."""
        name, entry = self.served_entry(gallery, key)
        if name is None:
            return None
        if entry is not None and int(entry["file"]["rows"]) == len(gallery):
            return self._mapped(name, entry)
        finding = _finding_of(anchor_set)
        if not self.writable:
            return None
        small = len(gallery) <= self.config.prepare_in_request_below
        if small or self.jobs is None:
            self.builder().entry(finding, spec.name, anchor_set.key)
            _, entry = self.served_entry(gallery, key)
            if entry is not None and int(entry["file"]["rows"]) == len(gallery):
                return self._mapped(name, entry)
            return None
        state = self.jobs.entry(finding, spec.name, anchor_set.key)
        raise FeaturesBeingPrepared(state.message(f"{finding} under {spec.display}"))

    def _mapped(self, name: str, entry: dict):
        stamp = (name, entry["file"]["file"], int(entry["file"]["rows"]))
        with self._lock:
            keys = self._keys.get(stamp)
        if keys is None:
            try:
                keys = entry_keys(self.folder, entry)
            except IndexDamaged as exc:
                log.warning("%s; its features are rebuilt", exc)
                archive = entry["file"]["file"].startswith("rows/")  # plain float32: embeddings
                self.repair(None if archive else entry)
                if self.jobs is not None:
                    raise FeaturesBeingPrepared(
                        f"{exc}: its features are being rebuilt; search again in a moment"
                    ) from None
                _, fresh = self.served_entry(self.gallery(), entry["geometry_key"])
                if fresh is None:
                    raise
                return self._mapped(name, fresh)
            with self._lock:
                self._keys = {k: v for k, v in self._keys.items() if k[0] != name}
                self._keys[stamp] = keys
        return keys

    def calibration(self, gallery, geometry, key, spec, anchor_set, finding, top_k):
        """(known, RankCalibration or None): known False asks the service to measure it."""
        from chexretrieve.search.calibration import calibration_from_fields

        name, entry = self.served_entry(gallery, key)
        if name is None:
            return False, None
        found = (entry or {}).get("calibrations", {}).get(str(int(top_k)))
        search = self.search
        if found is not None and (
            search is None
            or (found.get("queries"), found.get("fit_seed"))
            == (search.calibration_queries, search.fit_seed)
        ):
            fields = found["fields"]
            if fields is None:
                return True, None
            try:
                return True, calibration_from_fields(fields)
            except ValueError:  # written by another version of the calibration, or not sane
                pass
        if len(gallery) <= self.config.prepare_in_request_below or self.jobs is None:
            return False, None
        if self.writable and entry is not None:
            self.jobs.calibration(finding, spec.name, anchor_set.key, int(top_k))
        return True, None

    # -------------------------------------------------------------------------- repair
    def repair(self, entry: dict | None = None) -> None:
        """Rebuild what failed its seal: one entry's features, else the whole index (in the
        background in `serve`, now in a command)."""
        if not self.writable:
            return
        if self.jobs is not None:
            self.jobs.repair(entry)
            return
        rebuild(self, entry)


def rebuild(index: ArchiveIndex, entry: dict | None, progress=None) -> None:
    """Drop a damaged entry (or every file) from the index and build it again."""
    from chexretrieve.index.repair import rebuild_damaged

    rebuild_damaged(index, entry, progress)


def verify_all(gallery: IndexGallery) -> None:
    """Every block of every row file of the gallery's generation (IndexConfig.verify = all)."""
    from chexretrieve.index.rowfile import MappedRows

    manifest = gallery.manifest
    for name in manifest.content["files"]:
        MappedRows(manifest.folder, manifest.file(name)).verify()


def _finding_of(anchor_set) -> str:
    """The finding an anchor set ref belongs to (its key's id names it: pleural_effusion.a@1)."""
    from chexretrieve.findings import canonical_finding

    slug = anchor_set.key.split("@", 1)[0].split(".", 1)[0]
    return canonical_finding(slug)


#: how much nicer than the process the background verification runs (Linux: per thread)
BACKGROUND_NICENESS = 10


def lower_thread_priority(step: int = BACKGROUND_NICENESS) -> None:
    """Make the calling thread nicer by ``step`` (Linux schedules threads as tasks, so
    ``setpriority`` on the thread's id leaves the rest of the process as it was); nothing where
    that is not supported."""
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + step))
    except (AttributeError, OSError):  # not Linux, or not allowed: verified at full priority
        pass
