"""The compare viewer's actions (no Gradio): open a result beside the query, window both, say why
they are close. Opening a result is a view of its study and goes to the audit trail.

Pixel values of archived images are read from their files once and kept (a few, LRU) at their
stored size and shrunk to ``viewer_px`` on the longer side, so a window change or a zoom to full
resolution re-renders without decoding again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from chexretrieve.dicom.viewing import PixelValues, fitted_values
from chexretrieve.findings import canonical_finding
from chexretrieve.ui.handlers import CaseLookup, QueryImage, SearchSettings
from chexretrieve.ui.render import esc, format_age, format_date, format_text
from chexretrieve.ui.viewer import DEFAULT_PRESET, ViewerSide, compare_html, windows_for


@dataclass(frozen=True)
class CompareView:
    """What the viewer shows for one (query, result) pair."""

    # heading of the viewer (plain text)
    title: str
    # escaped HTML of the two panes under the window
    images_html: str
    # escaped HTML: labels and report of both images, and the explanation
    details_html: str

    @property
    def title_html(self) -> str:
        return f"<div class='cx-viewer-title'>{esc(self.title)}</div>"


def _subtitle(meta: dict) -> str:
    return (
        f"{format_text(meta.get('view_position'))} · {format_text(meta.get('patient_sex'))} "
        f"{format_age(meta.get('patient_age_years'))} · {format_date(meta.get('study_date'))}"
    )


def _bytes_values(pixels: np.ndarray, source: str) -> PixelValues:
    """8-bit display pixels as values (a placeholder or a stored thumbnail)."""
    values = np.asarray(pixels, dtype=np.float32)
    return PixelValues(
        values=values, default_center=128.0, default_width=256.0, window_source=source,
        invert=False, low=float(values.min()), high=float(values.max()),
        stored_shape=(int(values.shape[0]), int(values.shape[1])),
    )  # fmt: skip


class CompareViewer:
    """Side-by-side viewing over one :class:`CaseLookup` (its store, audit and reports)."""

    def __init__(self, lookup: CaseLookup, viewer_px: int = 1024, cache_entries: int = 16):
        self.lookup = lookup
        self.viewer_px = viewer_px
        self._cache: OrderedDict[int, tuple[PixelValues, PixelValues, tuple[str, ...]]] = (
            OrderedDict()
        )
        self._capacity = cache_entries
        self._lock = threading.Lock()

    def pixel_values(self, image_id: int) -> tuple[PixelValues, PixelValues, tuple[str, ...]]:
        """An archived image's values fitted to ``viewer_px`` and at the stored size (read once,
        cached) and notes; a stored thumbnail (or a placeholder) when the file cannot be read."""
        import os

        from chexretrieve.dicom import read_pixel_values

        image_id = int(image_id)
        with self._lock:
            if image_id in self._cache:
                self._cache.move_to_end(image_id)
                return self._cache[image_id]
        path = self.lookup._metadata(image_id).get("source_path")
        found = None
        if isinstance(path, str) and path and os.path.isfile(path):
            try:
                full = read_pixel_values(path, self.lookup.read_config)
                found = (fitted_values(full, self.viewer_px), full, ())
            except ValueError:
                found = None
        if found is None:
            thumb = _bytes_values(self.lookup.case_thumbnail(image_id), "stored thumbnail")
            found = (
                thumb,
                thumb,
                ("the archived file is not readable here: its stored thumbnail is shown",),
            )
        with self._lock:
            self._cache[image_id] = found
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        return found

    def query_side(self, query: QueryImage) -> ViewerSide:
        if query.source == "upload" and isinstance(query.values, PixelValues):
            full, notes = query.values, ()
            values = fitted_values(full, self.viewer_px)
        elif query.case_id is not None:
            values, full, notes = self.pixel_values(query.case_id)
        else:
            values, notes = _bytes_values(self.lookup.render_query(query), "display"), ()
            full = values
        return ViewerSide(f"Query · {query.name}", values, _subtitle(query.metadata), notes, full)

    def result_side(self, image_id: int, rank: int | None = None) -> ViewerSide:
        values, full, notes = self.pixel_values(image_id)
        meta = self.lookup._metadata(int(image_id))
        where = f"Result #{rank} · " if rank else "Result · "
        return ViewerSide(f"{where}case {int(image_id)}", values, _subtitle(meta), notes, full)

    def render(
        self, query: QueryImage | None, image_id: int | None, windows=None, rank=None,
        preset: str | None = DEFAULT_PRESET, full: bool = False,
    ) -> str:  # fmt: skip
        """The panes, each under its own window (``windows``: the viewer's window state, see
        ``chexretrieve.ui.viewer.updated_windows``), fitted or at full size (``full``); no audit
        record: the pair is already on screen."""
        if query is None:
            raise ValueError("no query to show: pick a case or upload an image first")
        result = self.result_side(image_id, rank) if image_id is not None else None
        typed = windows_for(windows, None if image_id is None else int(image_id))
        return compare_html(self.query_side(query), result, typed, preset, full)

    def _ohif_link(self, query: QueryImage, image_id: int, meta: dict, user: str | None) -> str:
        """The pair in the OHIF viewer (a new tab), when the viewer is installed."""
        if self.lookup.viewer_links is None or not meta.get("study_uid"):
            return ""
        query_study = None
        if query.case_id is not None:
            query_study = self.lookup._metadata(query.case_id).get("study_uid")
        link = self.lookup.viewer_links(user, query_study, [(image_id, meta["study_uid"])])
        return (
            f"<p class='cx-sub'><a class='cx-ohif' href='{esc(link[image_id])}' target='_blank' "
            "rel='noopener'>Open this pair in the OHIF viewer</a> (each image its own window, "
            "all of OHIF's tools)</p>"
        )

    def open(
        self,
        query: QueryImage | None,
        image_id: int | None,
        settings: SearchSettings,
        window=None,
        rank: int | None = None,
        user: str | None = None,
        record: bool = True,
        preset: str | None = DEFAULT_PRESET,
    ) -> CompareView:
        """The viewer for the query and result ``image_id`` (None: the query alone), recording
        the result's study as viewed ('viewer'); ``record=False`` for a re-render of a pair that
        is on screen already (after feedback re-ranked it)."""
        if query is None:
            raise ValueError("no query to show: pick a case or upload an image first")
        finding = canonical_finding(settings.finding)
        # each side once: its details table (titled "Query: ..." / "Result: ..."), labels, report
        query_html = f"<div class='cx-side'>{self.lookup.query_details(query, finding)}</div>"
        if image_id is None:
            images = self.render(query, None, window, preset=preset)
            return CompareView(f"Query: {query.name}", images, query_html)
        image_id = int(image_id)
        meta = self.lookup._metadata(image_id)
        if self.lookup.audit is not None and record:
            self.lookup.audit.view(user, image_id, meta.get("study_uid"), what="viewer")
        images = self.render(query, image_id, window, rank, preset)
        details = self.lookup.result_details(image_id, finding=finding, what=None)
        result_html = f"<div class='cx-side'>{details}</div>"
        explanation = self.lookup.explain(query, settings, image_id)
        details = (
            f"{self._ohif_link(query, image_id, meta, user)}"
            f"<div class='cx-sides'>{query_html}{result_html}</div>"
            f"<div class='cx-viewer-explanation'>{explanation}</div>"
        )
        title = f"{query.name} beside {'#' + str(rank) + ' · ' if rank else ''}case {image_id}"
        return CompareView(title[0].upper() + title[1:], images, details)
