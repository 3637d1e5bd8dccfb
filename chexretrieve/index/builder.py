"""Building and updating an archive index (``chexretrieve index build``, the end of ``ingest``,
a curator's publication, a first use of another geometry in ``serve``).

Every step runs under the folder's builder lock and ends with a committed generation, so a build
killed at any point (kill -9 included) leaves the previous generation serving, and the next
build resumes from the last checkpoint recorded in the sealed journal: a first read of the
archive after its last chunk, a feature entry after its last ``CHECKPOINT_ROWS`` rows.

Order of a build: the archive's rows (all of them the first time, afterwards only what the
store's change log names); each (finding, geometry) asked for, its features then its rank
calibrations, the finding switched to its latest anchor-set version once that version's default
geometry is complete; the entries of other geometries extended to the archive's new rows; the
archive density (fitted, or its new rows scored).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from chexretrieve.anchors.anchor_set import AnchorSetError
from chexretrieve.density.config import DensityConfig
from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.index.archive import ArchiveRows, append_archive
from chexretrieve.index.config import IndexConfig
from chexretrieve.index.density import (
    density_action,
    extend_index_density,
    fit_index_density,
    load_density,
    save_density,
)
from chexretrieve.index.entries import (
    entry_key,
    entry_keys,
    extend_entry,
    labels_digest,
    new_entry,
)
from chexretrieve.index.gallery import IndexGallery
from chexretrieve.index.manifest import (
    IndexUnavailable,
    Manifest,
    build_lock,
    clear_journal,
    commit,
    density_digest,
    empty_content,
    read_journal,
    read_manifest,
    write_journal,
)
from chexretrieve.index.rowfile import IndexDamaged, MappedRows
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.features import FeatureCache, parse_geometry

log = logging.getLogger(__name__)

#: (what is being done, done, total) -> None
Progress = Callable[[str, int, int], None]


def _quiet(what: str, done: int, total: int) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class _Temperature:
    """What the search service reads of an encoder when it only scores stored rows."""

    encoder_id: str
    inv_temperature: float


class _Provisional:
    """The search service's index view during a build: the entries of ``content`` (committed or
    not), never a calibration (the builder is measuring them)."""

    def __init__(self, folder: Path, content: dict, dtype: str):
        self.folder, self.content, self.dtype = folder, content, dtype
        self._keys: dict[str, object] = {}

    def features(self, gallery, geometry, key, spec, anchor_set):
        name = entry_key(key, self.dtype)
        entry = self.content["entries"].get(name)
        if entry is None or int(entry["file"]["rows"]) != len(gallery):
            return None
        if name not in self._keys:
            self._keys[name] = entry_keys(self.folder, entry)
        return self._keys[name]

    def calibration(self, *args):
        return False, None


class IndexBuilder:
    """Builds and updates the index of one store and encoder in ``folder``."""

    def __init__(
        self,
        folder: Path,
        store,
        encoder_id: str,
        anchors,
        config: IndexConfig | None = None,
        search: SearchConfig | None = None,
        density: DensityConfig | None = None,
        progress: Progress | None = None,
    ):
        self.folder = Path(folder)
        self.store = store
        self.anchors = anchors
        self.config = config or IndexConfig()
        self.search = search or SearchConfig()
        self.density = density or DensityConfig()
        self.progress = progress or _quiet
        record = store.encoder(encoder_id)
        if record is None:
            raise ValueError(f"encoder {encoder_id!r} is not in the store {store.label}")
        self.encoder = {
            "id": record.encoder_id,
            "dim": int(record.embed_dim),
            "inv_temperature": float(record.inv_temperature),
        }
        self.cache = FeatureCache(None, entries=4)
        #: seconds spent per phase (archive, features, calibration, density) by this builder
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def _timed(self, phase: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started
            self.timings[phase] = self.timings.get(phase, 0.0) + spent

    # -------------------------------------------------------------------------- public
    def build(
        self,
        findings: Sequence[str] = FINDINGS,
        geometries: Sequence[str] | None = None,
        wait: bool = True,
        anew: bool = False,
    ) -> Manifest | None:
        """Bring the archive up to date, then index each finding under ``geometries`` (None:
        IndexConfig.geometries_of), extend the other entries, fit or extend the density. None
        when ``wait`` is off and another builder holds the lock. ``anew``: read the archive
        again into new files (a file failed its seal); the old generation serves meanwhile."""
        with build_lock(self.folder, wait) as held:
            if not held:
                return None
            manifest = self._archive(anew)
            for finding in [canonical_finding(f) for f in findings]:
                for geometry in geometries or self.config.geometries_of(finding):
                    try:
                        manifest = self._entry(manifest, finding, geometry, None)
                    except AnchorSetError as exc:  # a finding without anchors is not indexed
                        log.warning("%s is not indexed under %s: %s", finding, geometry, exc)
            manifest = self._extend_others(manifest)
            manifest = self._density(manifest)
            return manifest

    def entry(self, finding: str, geometry: str, anchor_key: str | None = None) -> Manifest:
        """Index one (finding, geometry) of one anchor-set version (None: the finding's latest;
        its default geometry then also switches the finding to that version)."""
        with build_lock(self.folder):
            manifest = self._current() or self._archive()
            return self._entry(manifest, canonical_finding(finding), geometry, anchor_key)

    def update(self) -> Manifest:
        """Only what the archive's changes need: its rows, the entries' new rows, the density."""
        with build_lock(self.folder):
            manifest = self._extend_others(self._archive())
            return self._density(manifest)

    # ----------------------------------------------------------------------- the archive
    def _current(self) -> Manifest | None:
        try:
            manifest = read_manifest(self.folder)
        except IndexUnavailable as exc:
            log.warning("%s; it is rebuilt", exc)
            return None
        if manifest is None:
            return None
        content = manifest.content
        if content.get("store") != self.store.label or content.get("encoder") != self.encoder:
            log.warning("the index in %s is of another store or encoder; rebuilt", self.folder)
            return None
        return manifest

    def _fresh(self, previous: Manifest | None) -> dict:
        content = empty_content(self.store.label, self.encoder)
        if previous is not None:
            content["serial"] = previous.content.get("serial", 0)  # new names: readers go on
        return content

    def _archive(self, anew: bool = False) -> Manifest:
        with self._timed("archive"):
            return self._read_archive(anew)

    def _read_archive(self, anew: bool) -> Manifest:
        manifest = self._current()
        generation = manifest.generation if manifest is not None else None
        if manifest is not None and manifest.content["files"] and manifest.rows and not anew:
            changes = self.store.archive_changes(manifest.revision)
            if changes.revision == manifest.revision and changes.complete:
                return manifest
            if changes.complete:
                return self._apply_changes(manifest, changes)
            log.warning("the store's change log has a gap since revision %s; the archive is "
                        "read again", manifest.revision)  # fmt: skip
        journal = read_journal(self.folder)
        resumable = (
            not anew
            and journal is not None
            and journal.get("phase") == "archive"
            and journal.get("base") == generation
            and journal["content"].get("store") == self.store.label
            and journal["content"].get("encoder") == self.encoder
        )
        if resumable:
            content, after, revision = journal["content"], journal["after"], journal["revision"]
        else:
            content, after, revision = self._fresh(manifest), 0, self.store.archive_revision()
        total, _ = self.store.archive_extent(self.encoder["id"])
        writer = ArchiveRows(self.folder, content, self.encoder["dim"])

        def on_chunk(last_id: int) -> None:
            write_journal(self.folder, {"phase": "archive", "base": generation,
                                        "content": content, "after": last_id,
                                        "revision": revision})  # fmt: skip
            self.progress("archive rows", int(content["rows"]), max(total, content["rows"]))

        try:
            self.progress("archive rows", int(content["rows"]), total)
            append_archive(writer, self.store, self.encoder["id"], after,
                           self.config.chunk_rows, on_chunk, total)  # fmt: skip
            writer.checkpoint()
        finally:
            writer.close()
        content["revision"] = int(revision)
        committed = commit(self.folder, content, generation)
        clear_journal(self.folder)
        return committed

    def _apply_changes(self, manifest: Manifest, changes) -> Manifest:
        content = copy.deepcopy(manifest.content)
        gallery = IndexGallery(manifest)
        ids = np.asarray(changes.image_ids, dtype=np.int64)
        known = np.array([i in gallery for i in ids.tolist()], dtype=bool)
        writer = ArchiveRows(self.folder, content, self.encoder["dim"])
        try:
            if known.any():
                chunk = self.store.archive_rows(self.encoder["id"], ids[known].tolist())
                rows = np.array([gallery.row_of(i) for i in chunk.image_ids.tolist()], np.int64)
                changed = writer.replace(rows, chunk) if len(rows) else []
                if "labels" in changed:
                    content["labels_changed"] = int(changes.revision)
            new = ids[~known]
            step = self.config.chunk_rows
            for start in range(0, len(new), step):
                writer.append(
                    self.store.archive_rows(self.encoder["id"], new[start : start + step])
                )
                self.progress("archive rows", int(content["rows"]), int(content["rows"]))
            writer.checkpoint()
        finally:
            writer.close()
        content["revision"] = int(changes.revision)
        return commit(self.folder, content, manifest.generation)

    # ------------------------------------------------------------------------- entries
    def _anchor(self, finding: str, key: str | None):
        return self.anchors.anchor_set(finding, key)

    def _fit(self, spec, anchor):
        prior = self.anchors.broad_prior if spec.posterior else None
        return self.cache.geometry(spec, anchor.embeddings, anchor.content_hash,
                                   self.encoder["inv_temperature"], prior,
                                   self.search.fit_seed)  # fmt: skip

    def _entry(self, manifest: Manifest, finding: str, geometry_name: str, anchor_key,
               dtype: str | None = None):  # fmt: skip
        spec = parse_geometry(geometry_name)
        anchor = self._anchor(finding, anchor_key)
        geometry, gkey = self._fit(spec, anchor)
        dtype = dtype or self.config.feature_dtype
        name = entry_key(gkey, dtype)
        content = copy.deepcopy(manifest.content)
        entry = content["entries"].get(name)
        if entry is None or int(entry["file"]["rows"]) != manifest.rows:
            journal = read_journal(self.folder)
            if (journal is not None and journal.get("phase") == "entry"
                    and journal.get("base") == manifest.generation
                    and journal.get("name") == name):  # fmt: skip
                entry, content["serial"] = journal["entry"], journal["serial"]
            elif entry is None:
                content["serial"] = int(content.get("serial", 0)) + 1
                inputs = self.cache._geometry_inputs.get(gkey, {})
                entry = new_entry(finding, anchor, spec, geometry, gkey, inputs, dtype,
                                  content["serial"], self.encoder["dim"])  # fmt: skip
            embeddings = MappedRows(self.folder, manifest.file("embeddings"))
            label = f"features {finding} · {spec.name}"

            def checkpoint(partial: dict) -> None:
                write_journal(self.folder, {"phase": "entry", "base": manifest.generation,
                                            "name": name, "entry": partial,
                                            "serial": content["serial"]})  # fmt: skip

            def shown(done: int, total: int) -> None:
                self.progress(label, done, total)

            with self._timed("features"):
                entry = extend_entry(self.folder, entry, geometry, embeddings, checkpoint, shown)
            content["entries"][name] = entry
            manifest = commit(self.folder, content, manifest.generation)
            clear_journal(self.folder)
        manifest = self._calibrate(manifest, name)
        default = self.config.default_geometry_of(finding) == spec.name
        if default and anchor_key is None and manifest.serving.get(finding) != anchor.key:
            manifest = self._switch(manifest, finding, anchor.key)
        return manifest

    def _switch(self, manifest: Manifest, finding: str, key: str) -> Manifest:
        """Serve ``finding`` with anchor set ``key`` from now on; the entries of the version it
        replaces are dropped."""
        content = copy.deepcopy(manifest.content)
        old = content["serving"].get(finding)
        content["serving"][finding] = key
        if old is not None and old != key:
            content["entries"] = {
                name: e for name, e in content["entries"].items()
                if not (e["finding"] == finding and e["anchor_key"] == old)
            }  # fmt: skip
        log.info("%s is now served with %s (was %s)", finding, key, old)
        return commit(self.folder, content, manifest.generation)

    def _extend_others(self, manifest: Manifest) -> Manifest:
        """Every entry behind the archive extended to its rows (its anchors refitted), or
        dropped when its anchor set is gone."""
        for name, entry in list(manifest.entries.items()):
            if int(entry["file"]["rows"]) == manifest.rows:
                if self._calibration_stale(manifest, entry):
                    manifest = self._calibrate(manifest, name)
                continue
            try:
                anchor = self._anchor(entry["finding"], entry["anchor_key"])
                _, gkey = self._fit(parse_geometry(entry["geometry"]), anchor)
                if entry_key(gkey, entry["dtype"]) != name:
                    raise ValueError("its anchor set's content or the fit's inputs changed")
            except (ValueError, OSError) as exc:
                log.warning("entry %s dropped: %s", name, exc)
                content = copy.deepcopy(manifest.content)
                content["entries"].pop(name, None)
                manifest = commit(self.folder, content, manifest.generation)
                continue
            manifest = self._entry(manifest, entry["finding"], entry["geometry"], anchor.key,
                                   entry["dtype"])  # fmt: skip
        return manifest

    # --------------------------------------------------------------------- calibrations
    def _calibration_stale(self, manifest: Manifest, entry: dict) -> bool:
        wanted = {str(k) for k in self.config.calibration_top_k}
        found = entry.get("calibrations", {})
        if not wanted <= set(found):
            return True
        for measured in found.values():
            grown = (manifest.rows - measured["rows"]) / max(1, measured["rows"])
            if grown > self.config.recalibrate_fraction:
                return True
            if measured.get("labels_revision") != manifest.content.get("labels_changed"):
                return True
        return False

    def calibration_inputs(self) -> dict:
        """The search settings a calibration depends on (a serving search with others
        measures its own)."""
        return {"queries": self.search.calibration_queries, "fit_seed": self.search.fit_seed}

    def _calibrate(self, manifest: Manifest, name: str, top_ks: Sequence[int] = ()) -> Manifest:
        entry = manifest.entries[name]
        if not top_ks and not self._calibration_stale(manifest, entry):
            return manifest
        with self._timed("calibration"):
            return self._measure(manifest, name, top_ks)

    def _measure(self, manifest: Manifest, name: str, top_ks: Sequence[int]) -> Manifest:
        from chexretrieve.search.calibration import calibration_fields
        from chexretrieve.search.service import SearchRequest, SearchService

        entry = manifest.entries[name]
        wanted = [int(k) for k in (top_ks or self.config.calibration_top_k)]
        content = copy.deepcopy(manifest.content)
        gallery = IndexGallery(manifest)
        service = SearchService(
            lambda: gallery, self.anchors, config=self.search,
            encoder=_Temperature(self.encoder["id"], self.encoder["inv_temperature"]),
            index=_Provisional(self.folder, content, entry["dtype"]),
        )  # fmt: skip
        codes = gallery.label_codes()[:, FINDINGS.index(entry["finding"])]
        found = dict(content["entries"][name].get("calibrations", {}))
        nearest = sampled_nearest(gallery, gallery.label_values(entry["finding"]),
                                  self.search)  # fmt: skip
        for top_k in wanted:
            self.progress(f"calibration {entry['finding']} · {entry['geometry']}", 0, 1)
            request = SearchRequest(finding=entry["finding"], geometry=entry["geometry"],
                                    anchor_set=entry["anchor_key"],
                                    case_id=int(gallery.image_ids[0]))  # fmt: skip
            measured = service.measure_calibration(request, top_k, nearest)
            found[str(top_k)] = {
                "fields": None if measured is None else calibration_fields(measured),
                "rows": manifest.rows,
                "labels": labels_digest(codes),
                "labels_revision": manifest.content.get("labels_changed"),
                **self.calibration_inputs(),
            }
            self.progress(f"calibration {entry['finding']} · {entry['geometry']}", 1, 1)
        content["entries"][name]["calibrations"] = found
        return commit(self.folder, content, manifest.generation)

    def calibrate(self, finding: str, geometry: str, anchor_key: str, top_k: int) -> Manifest:
        """Measure one more top k of an indexed entry (a first use of that top k)."""
        with build_lock(self.folder):
            manifest = self._current()
            if manifest is None:
                raise IndexUnavailable(f"no index in {self.folder}")
            spec = parse_geometry(geometry)
            _, gkey = self._fit(spec, self._anchor(finding, anchor_key))
            name = entry_key(gkey, self.config.feature_dtype)
            if name not in manifest.entries:
                manifest = self._entry(manifest, finding, geometry, anchor_key)
            return self._calibrate(manifest, name, (top_k,))

    # -------------------------------------------------------------------------- density
    def _density(self, manifest: Manifest) -> Manifest:
        if not self.config.density or manifest.rows < self.density.min_images:
            return manifest
        record = manifest.content.get("density")
        action = density_action(record, manifest.rows, self.density)
        if action == "keep":
            with contextlib.suppress(OSError):
                if density_digest(self.folder / record["file"]) == record["sha256"]:
                    return manifest
            log.warning("the index's density file fails its seal; refitted")
            action = "fit"
        with self._timed("density"):
            return self._fit_density(manifest, record, action)

    def _fit_density(self, manifest: Manifest, record, action: str) -> Manifest:
        gallery = IndexGallery(manifest)
        self.progress("archive density", 0, 1)
        content = copy.deepcopy(manifest.content)
        content["serial"] = int(content.get("serial", 0)) + 1
        file = f"density/density.{content['serial']:04d}.npz"
        fitted_rows = manifest.rows
        density = None
        if action == "extend":
            try:
                density = extend_index_density(load_density(self.folder, record), gallery)
                fitted_rows = int(record["fitted_rows"])
            except (ValueError, OSError, IndexDamaged) as exc:
                log.warning("the index's density cannot be extended (%s); refitted", exc)
        if density is None:
            density = fit_index_density(gallery, self.store.label, self._anchor_texts(),
                                        self.density)  # fmt: skip
        content["density"] = save_density(self.folder, file, density, fitted_rows)
        self.progress("archive density", 1, 1)
        return commit(self.folder, content, manifest.generation)

    def _anchor_texts(self) -> list:
        from chexretrieve.density.archive import AnchorText

        texts = []
        for finding in FINDINGS:
            try:
                ref = self.anchors.anchor_set(finding, None)
            except (ValueError, OSError):
                continue
            texts.append(AnchorText(finding, tuple(ref.sentences), np.asarray(ref.embeddings)))
        return texts


def sampled_nearest(gallery, labels, search: SearchConfig) -> dict[int, float]:
    """{row: its highest cosine with a row of another study} for the rows a calibration of
    these labels samples (``search.calibration``'s rule and seed), in one pass over the
    embeddings instead of one per sampled row. A row the calibration picks that is not here
    (its sampling changed) is computed when asked for (the same value up to float32 rounding)."""
    from chexretrieve.search.calibration import (
        MIN_LABELLED,
        prevalence,
        queries_for,
        sample_queries,
        statuses,
    )

    status = statuses(labels)
    if prevalence(status)[1] < MIN_LABELLED:
        return {}
    wanted = queries_for(len(gallery), search.calibration_queries)
    rows = sample_queries(status, wanted, search.fit_seed)
    queries = gallery.embedding_rows(rows).astype(np.float32)  # (q, d)
    studies = gallery.study_codes
    embeddings = gallery.embeddings
    best = np.full(len(rows), -np.inf, dtype=np.float32)
    step = 65_536
    for start in range(0, len(gallery), step):
        block = np.asarray(embeddings[start : start + step], dtype=np.float32)
        cosines = block @ queries.T  # (block, q)
        same = studies[start : start + step, None] == studies[rows][None, :]
        cosines[same] = -np.inf
        np.maximum(best, cosines.max(axis=0), out=best)
    return {int(r): float(v) for r, v in zip(rows, best, strict=True) if np.isfinite(v)}
