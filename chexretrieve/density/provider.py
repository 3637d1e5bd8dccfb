"""The archive density a search uses: found, loaded, refitted when needed, and honest about age.

:class:`ArchiveDensityProvider` is what the search service calls (``assess``) for every query.
Which fit it uses, in order:
1. the fit held in memory or saved for the store's current generation
   (``Store.archive_revision()``) whose gallery fingerprint equals today's gallery's: current;
2. otherwise the newest saved fit of this store and encoder, if at most
   ``DensityConfig.refit_fraction`` of its images were added or removed since: used, but every
   assessment says ``stale`` and how far the archive moved (the UI and JSON show it);
3. otherwise a new fit from today's gallery when ``fit_on_search`` (saved for the next search),
   else no density, with a note saying to run ``chexretrieve density fit``. A gallery larger
   than ``background_fit_above`` is fitted in a background thread (minutes at 100,000 images):
   searches meanwhile carry no density and a note saying it is being fitted. A *refit* (rule 2
   failed on drift) always runs in the background while the old fit serves, flagged ``stale``
   with a note, so no search waits for one; one-shot commands (``background_fit_above`` =
   ``FIT_NOW``) fit and refit during the call.
A gallery with fewer than ``min_images`` images gets no density and a note saying so.

A saved fit is verified before use (:mod:`chexretrieve.density.density_file`: keyed seal,
provenance, values). One that fails (unreadable, truncated, a bad CRC, forged, copied from another
store or revision, NaN or misshapen values) is never used: it is moved to ``set-aside/`` beside the
fits and refitted; in a server in the background, the searches meanwhile answering without
typicality and saying so (``typicality unavailable: rebuilding``, or an older fit within the refit
threshold flagged stale), in one-shot commands during the call; ``density show`` (which never
fits) says it is damaged and leaves it in place.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from chexretrieve.cache import cache_folder
from chexretrieve.density.archive import (
    AnchorText,
    ArchiveDensity,
    ComponentName,
    density_path,
    fit_archive_density,
    fitting_settings,
    saved_revisions,
)
from chexretrieve.density.config import FIT_NOW, DensityConfig
from chexretrieve.density.density_file import DensityFileError
from chexretrieve.findings import FINDINGS
from chexretrieve.seal import SealError

logger = logging.getLogger("chexretrieve.density")

#: what the UI shows above the results of an out-of-distribution query
OOD_MESSAGE = "this image is unlike the archive: results may not be meaningful"
#: saved fits kept per (store, encoder); older ones are deleted after a new fit is saved
KEPT_FITS = 2
#: what a search says while a damaged fit is rebuilt in the background
UNAVAILABLE_REBUILDING = "typicality unavailable: rebuilding"
#: folder (beside the fits) damaged fits are moved to, and how many of them are kept there
SET_ASIDE = "set-aside"
SET_ASIDE_KEPT = 3


@dataclass(frozen=True)
class ConceptShare:
    component: int
    posterior: float
    name: ComponentName

    def as_dict(self) -> dict:
        return {"component": self.component, "posterior": self.posterior, **self.name.as_dict()}


@dataclass(frozen=True)
class QueryDensity:
    """How typical one query is of the archive, under the archive's vMF mixture."""

    # log-density of the query embedding (nats, w.r.t. the sphere's surface measure)
    log_density: float
    # share (0..100) of the archive's reference images scoring at or below the query
    percentile: float
    # log-density below which a query is out of distribution (the archive's ood_percentile-th)
    threshold: float
    ood_percentile: float
    ood: bool
    # the fit used is older than the archive (see note)
    stale: bool
    # archive generation and size the fit was made on
    revision: int
    n_images: int
    n_components: int
    note: str = ""
    concepts: tuple[ConceptShare, ...] = field(default=())
    # whose log-density log_density / percentile / ood are: "movmf" or "gaussian"
    ood_model: str = "movmf"

    @property
    def message(self) -> str:
        return OOD_MESSAGE if self.ood else ""

    def audit_fields(self) -> dict:
        """What the audit trail records of the assessment (no concepts: they are derived)."""
        return {
            "ood": self.ood,
            "log_density": round(self.log_density, 4),
            "percentile": round(self.percentile, 3),
            "stale": self.stale,
            "revision": self.revision,
        }

    def as_dict(self) -> dict:
        return {
            "available": True,
            "log_density": self.log_density,
            "percentile": self.percentile,
            "threshold": self.threshold,
            "ood_percentile": self.ood_percentile,
            "ood": self.ood,
            "message": self.message,
            "stale": self.stale,
            "note": self.note,
            "revision": self.revision,
            "n_images": self.n_images,
            "n_components": self.n_components,
            "ood_model": self.ood_model,
            "concepts": [c.as_dict() for c in self.concepts],
        }


@dataclass(frozen=True)
class DensityUnavailable:
    """No density for this search, and why (too few images, no fit and fit_on_search off)."""

    note: str
    ood: bool = False

    stale: bool = False
    concepts: tuple = ()

    @property
    def message(self) -> str:
        return ""

    def audit_fields(self) -> dict:
        return {"ood": None, "note": self.note}

    def as_dict(self) -> dict:
        return {"available": False, "ood": False, "note": self.note}


class ArchiveDensityProvider:
    """Finds or fits the archive density of one store and encoder; thread-safe."""

    def __init__(self, store, encoder_id: str, config: DensityConfig | None = None, anchors=None):
        self.store = store
        self.encoder_id = encoder_id
        self.config = config or DensityConfig()
        # optional: an AnchorProvider whose finding sets name the components
        self.anchors = anchors
        self.folder = Path(self.config.cache_dir or cache_folder("density"))
        self._current: ArchiveDensity | None = None
        self._lock = threading.Lock()
        self._fit_lock = threading.Lock()  # one fit at a time; waiting searches reuse it
        self._background: threading.Thread | None = None  # a fit of a large archive, running
        self._background_error = ""
        # why the saved fit being rebuilt was damaged ("" when none is)
        self._damage_note = ""
        # damaged files that could not be set aside: path -> (mtime_ns, size) when found
        self._rejected: dict[str, tuple[int, int]] = {}
        #: why the last fit could not be saved ("" when it was)
        self.save_error = ""

    # --------------------------------------------------------------------------- the fit
    def fit(self, gallery) -> ArchiveDensity:
        """Fit on ``gallery`` now, save it under the store's generation, and use it."""
        revision = self.store.archive_revision()
        density = fit_archive_density(
            gallery.image_ids,
            gallery.embeddings,
            encoder_id=self.encoder_id,
            store_label=self.store.label,
            revision=revision,
            fingerprint=gallery.fingerprint,
            labels=gallery.labels,
            anchors=self._anchor_texts(),
            config=self.config,
        )
        path = density_path(self.folder, self.store.label, self.encoder_id, revision)
        try:
            density.save(path)
            for _, old in saved_revisions(self.folder, self.store.label, self.encoder_id)[
                KEPT_FITS:
            ]:
                old.unlink(missing_ok=True)
            self.save_error = ""
        except (OSError, SealError) as exc:  # costs a refit per process, never a search
            why = exc.strerror or exc if isinstance(exc, OSError) else exc
            self.save_error = (
                f"the density could not be saved under {self.folder} ({why}); it is kept in "
                "memory only"
            )
        with self._lock:
            self._current = density
        return density

    def _anchor_texts(self) -> list[AnchorText]:
        if self.anchors is None:
            return []
        texts = []
        for finding in FINDINGS:
            try:
                ref = self.anchors.anchor_set(finding, None)
            except (ValueError, OSError):  # a finding without an anchor set names nothing
                continue
            texts.append(
                AnchorText(
                    finding,
                    tuple(ref.sentences),
                    np.asarray(ref.embeddings),
                    tuple(getattr(ref, "polarities", ()) or ()),
                )
            )
        return texts

    def usable(self, gallery) -> tuple[ArchiveDensity | None, bool, str]:
        """(fit, stale, note) for ``gallery`` by the rules of the module text."""
        if len(gallery) < self.config.min_images:
            return (
                None,
                False,
                (
                    f"no density: the archive has {len(gallery)} images of this encoder, fewer "
                    f"than DensityConfig.min_images = {self.config.min_images}"
                ),
            )
        settings = fitting_settings(self.config)
        with self._lock:
            held = self._current
        if held is not None and held.settings != settings:
            held = None  # fitted under other settings (an edited DensityConfig): not reused
        if held is not None and held.fingerprint == gallery.fingerprint:
            return held, False, ""
        candidate, damage = self._newest_saved(held, settings, gallery.fingerprint)
        if candidate is not None and candidate.fingerprint == gallery.fingerprint:
            with self._lock:
                self._current = candidate
            return candidate, False, ""
        if damage is not None or self._rebuilding():
            rebuilt = self._rebuild(gallery, candidate)
            if rebuilt is not None:
                return rebuilt
        if candidate is not None:
            drift = candidate.drift(gallery.image_ids)
            if drift <= self.config.refit_fraction:
                now = self.store.archive_revision()
                return (
                    candidate,
                    True,
                    (
                        f"density fitted at archive revision {candidate.revision} on "
                        f"{candidate.n_images} images; the archive is now at revision {now} with "
                        f"{len(gallery)} images ({100 * drift:.1f} % added or removed, under the "
                        f"{100 * self.config.refit_fraction:.0f} % refit threshold); run "
                        "`chexretrieve density fit` to refresh it"
                    ),
                )
        synchronous = self.config.background_fit_above >= FIT_NOW  # one-shot commands
        if candidate is not None and self.config.fit_on_search and not synchronous:
            # never hold a search up for a refit: the old fit serves, flagged, meanwhile
            started = self._fit_in_background(gallery)
            return (
                candidate,
                True,
                (
                    f"density fitted on {candidate.n_images} images at archive revision "
                    f"{candidate.revision}; {100 * drift:.1f} % of the archive was added or "
                    f"removed since (over the {100 * self.config.refit_fraction:.0f} % refit "
                    f"threshold): {started}"
                ),
            )
        if not self.config.fit_on_search:
            why = "none was fitted" if candidate is None else "the saved one is too old"
            return (
                None,
                False,
                (
                    f"no density: {why} (DensityConfig.fit_on_search is off); run "
                    "`chexretrieve density fit`"
                ),
            )
        if len(gallery) > self.config.background_fit_above:
            return None, False, "no density yet: " + self._fit_in_background(gallery)
        return self._fit_now(gallery, settings), False, ""

    def _fit_now(self, gallery, settings: str) -> ArchiveDensity:
        with self._fit_lock:
            with self._lock:
                held = self._current
            if (
                held is not None
                and held.fingerprint == gallery.fingerprint
                and held.settings == settings
            ):
                return held  # fitted by another search meanwhile
            return self.fit(gallery)

    # --------------------------------------------------------------- damaged saved fits
    def _newest_saved(
        self, held, settings: str, fingerprint: str
    ) -> tuple[ArchiveDensity | None, DensityFileError | None]:
        """(the newest saved fit usable under ``settings``, or the held one; the damage found on
        the way). A damaged file is set aside (when this provider may refit) and skipped."""
        damage = None
        for revision, path in saved_revisions(self.folder, self.store.label, self.encoder_id):
            if held is not None and revision == held.revision:
                break  # the newest file is the fit held in memory: no need to read it again
            if self._rejected_before(path):
                continue
            expect = {"store": self.store.label, "encoder": self.encoder_id, "revision": revision}
            try:
                saved = ArchiveDensity.load(path, expect=expect)
            except DensityFileError as exc:
                damage = damage or exc
                self._set_aside(path, exc)
                continue  # an older file may still serve; this one is refitted
            if saved.settings != settings:
                break  # fitted under other settings: refitted
            if held is None or saved.revision > held.revision or saved.fingerprint == fingerprint:
                return saved, damage
            break  # only the newest readable file matters
        return held, damage

    def _rejected_before(self, path: Path) -> bool:
        """A file this provider found damaged and could not move, unchanged since."""
        try:
            info = path.stat()
        except OSError:
            return True
        return self._rejected.get(str(path)) == (info.st_mtime_ns, info.st_size)

    def _set_aside(self, path: Path, damage: DensityFileError) -> None:
        """Move a damaged fit into ``set-aside/`` (kept for inspection, SET_ASIDE_KEPT of them);
        a provider that may not refit (``density show``) leaves it where it is."""
        with self._lock:
            self._damage_note = damage.reason
        if not self.config.fit_on_search:
            return  # `density show`: its one line says it
        logger.warning("archive density %s set aside and refitted: %s", path, damage.reason)
        aside = path.parent / SET_ASIDE
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        try:
            aside.mkdir(exist_ok=True, mode=0o700)
            os.replace(path, aside / f"{path.stem}-{stamp}-{os.getpid()}{path.suffix}")
        except FileNotFoundError:
            return  # another process set it aside first
        except OSError as exc:  # a read-only folder: remember it, never read it again unchanged
            logger.warning("cannot set %s aside (%s)", path, exc.strerror or exc)
            try:
                info = path.stat()
                self._rejected[str(path)] = (info.st_mtime_ns, info.st_size)
            except OSError:
                pass
            return
        kept = sorted(aside.glob("revision-*.npz"), key=lambda p: p.name, reverse=True)
        for old in kept[SET_ASIDE_KEPT:]:
            old.unlink(missing_ok=True)

    def _rebuilding(self) -> bool:
        with self._lock:
            running = self._background is not None and self._background.is_alive()
            return running and bool(self._damage_note)

    def _rebuild(self, gallery, candidate) -> tuple | None:
        """What a search gets while a damaged fit is rebuilt: refitted now in one-shot commands,
        in the background in a server (the search answers without typicality meanwhile, or with
        an older fit within the refit threshold, flagged stale). None: the usual rules apply."""
        with self._lock:
            reason = self._damage_note
        if not self.config.fit_on_search:  # `density show`: says so, changes nothing
            if candidate is not None:
                return None
            return (
                None,
                False,
                f"density unavailable: the saved archive density is damaged ({reason}); "
                "`chexretrieve density fit` (or the next search) refits it",
            )
        what = f"the saved archive density was damaged ({reason}) and set aside"
        if self.config.background_fit_above >= FIT_NOW:
            density = self._fit_now(gallery, fitting_settings(self.config))
            with self._lock:
                self._damage_note = ""
            return density, False, f"{what}; refitted now"
        started = self._fit_in_background(gallery)
        if (
            candidate is not None
            and candidate.drift(gallery.image_ids) <= self.config.refit_fraction
        ):
            return candidate, True, f"{what}: an older fit serves meanwhile ({started})"
        return None, False, f"{UNAVAILABLE_REBUILDING}; {what}; {started}"

    def _fit_in_background(self, gallery) -> str:
        """Start (once) a fit of ``gallery`` in a thread; the note searches carry meanwhile."""
        with self._lock:
            running = self._background is not None and self._background.is_alive()
            error = self._background_error
            if not running and not error:  # after a failure: no retry per search (see note)
                self._background = threading.Thread(
                    target=self._background_fit, args=(gallery,), daemon=True,
                    name="density-fit",
                )  # fmt: skip
                self._background.start()
        if error:
            return f"the last background fit failed ({error}); run `chexretrieve density fit`"
        return (
            f"the archive density of {len(gallery):,} images is being fitted in the background "
            "(minutes for a large archive); searches use it once it is ready"
        )

    def _background_fit(self, gallery) -> None:
        try:
            with self._fit_lock:
                self.fit(gallery)
            with self._lock:
                self._damage_note = ""
        except Exception as exc:  # noqa: BLE001 - a thread's failure is reported by the next note
            with self._lock:
                self._background_error = f"{type(exc).__name__}: {exc}"

    def wait_for_background_fit(self, timeout: float | None = None) -> None:
        """Block until a background fit (if any) ends (tests, the CLI)."""
        thread = self._background
        if thread is not None:
            thread.join(timeout)

    def held(self) -> ArchiveDensity | None:
        """The fit the last assessment used (None before the first)."""
        with self._lock:
            return self._current

    # ------------------------------------------------------------------------ assessments
    def assess(self, query, gallery) -> QueryDensity | DensityUnavailable:
        """The query's log-density, percentile and OOD flag, and its concept decomposition."""
        density, stale, note = self.usable(gallery)
        if density is None:
            return DensityUnavailable(note)
        row = np.asarray(query, dtype=np.float64).reshape(1, -1)
        row = row / np.linalg.norm(row)
        values, posterior = density.model.log_density_and_posterior(row)
        value = float(values[0])
        if density.gaussian is not None:  # DensityConfig.ood_model = "gaussian"
            value = float(density.ood_score(row)[0])
        return QueryDensity(
            log_density=value,
            percentile=float(density.percentile([value])[0]),
            threshold=density.threshold,
            ood_percentile=density.ood_percentile,
            ood=bool(value < density.threshold),
            stale=stale,
            revision=density.revision,
            n_images=density.n_images,
            n_components=density.model.n_components,
            note="; ".join(n for n in (note, self.save_error) if n),
            ood_model=density.ood_model,
            concepts=self.concepts(density, row, posterior)[0],
        )

    def with_concepts(self, hits, gallery) -> tuple:
        """``hits`` (SearchHit) with each result's concept decomposition attached."""
        density = self.held()
        if density is None:
            return tuple(hits)
        rows = [gallery.row_of(hit.image_id) for hit in hits]
        shares = self.concepts(density, gallery.embeddings[rows])
        return tuple(replace(hit, concepts=c) for hit, c in zip(hits, shares, strict=True))

    def concepts(self, density: ArchiveDensity, rows, posterior=None) -> list[tuple]:
        """Per row: its ConceptShares (top components covering ``concept_mass``)."""
        rows = np.asarray(rows, dtype=np.float64)
        rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return [
            tuple(ConceptShare(k, p, density.components[k]) for k, p in shares)
            for shares in density.decompose(rows, self.config.concept_mass, posterior)
        ]
