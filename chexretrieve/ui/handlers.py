"""What the case-lookup UI does, as plain Python (no Gradio): the Gradio layer only wires it up.

``CaseLookup`` holds a :class:`~chexretrieve.search.service.SearchService`, the store and the
encoder. Its methods take and return plain values (ids, arrays, strings, small dataclasses), so the
tests drive them directly. Archived images are read on the server from their source files, rendered
to 8-bit and handed to the browser as pixels: no file path ever leaves the server.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chexretrieve.findings import canonical_finding
from chexretrieve.geometry import geometry_name
from chexretrieve.search.gallery import SearchFilters
from chexretrieve.search.service import SearchRequest, SearchResult
from chexretrieve.ui.render import (
    details_html,
    esc,
    explanation_html,
    format_age,
    format_date,
    format_text,
    hit_caption,
    hits_table_html,
    placeholder,
    thumbnail,
)

#: the age range the filter widgets start at; a bound left at its end means "no bound" (so cases
#: of unknown age are kept until the user narrows the range)
AGE_ANY = (0, 120)

#: the geometry always shown beside the chosen one (the anchor-free reference)
REFERENCE_GEOMETRY = "cosine"


@dataclass(frozen=True)
class QueryImage:
    """The current query of one browser session (kept in Gradio's per-session state)."""

    # "case" (an archived image) or "upload"
    source: str
    # how the query is named on screen ("case 12", "uploaded image")
    name: str
    # display pixels, float32 in [0, 1], at most ~3 thumbnails wide (for windowing on screen)
    pixels: np.ndarray
    # PHI-minimal metadata (see render.DETAIL_FIELDS); raw values, escaped when shown
    metadata: dict
    # archived image id (source == "case")
    case_id: int | None = None
    # unit embedding of an uploaded image, computed once at upload
    embedding: np.ndarray | None = None
    # what the reader tolerated (shown under the details)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchSettings:
    """Everything in the search panel except the query."""

    finding: str
    geometry: str = "softmax"
    # "id@version"; None = the finding's latest set
    anchor_set: str | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)
    top_k: int = 12
    # free text mixed into the image query (composite query)
    text: str | None = None


@dataclass(frozen=True)
class RankingView:
    """One ranking ready for the screen."""

    # plain-text heading
    title: str
    # (8-bit thumbnail, plain caption) per result, best first
    items: list[tuple[np.ndarray, str]]
    # image id of each item
    image_ids: tuple[int, ...]
    # escaped HTML table of the results
    table_html: str
    result: SearchResult


def parse_filters(
    views: list[str] | None,
    sex: str | None,
    age_min: float | None,
    age_max: float | None,
    date_from: str | None,
    date_to: str | None,
    label_known: bool,
) -> SearchFilters:
    """SearchFilters from the filter widgets; ValueError naming a bad date or range.

    Empty values, and ages left at the ends of ``AGE_ANY``, mean no bound.
    """

    def date(value: str | None, name: str) -> dt.date | None:
        if value is None or not str(value).strip():
            return None
        try:
            return dt.date.fromisoformat(str(value).strip()[:10])
        except ValueError:
            raise ValueError(f"{name} must be a date like 2024-03-31, not {value!r}") from None

    def number(value, open_end: float) -> float | None:
        if value is None or value == "" or float(value) == open_end:
            return None
        return float(value)

    return SearchFilters(
        views=tuple(views or ()),
        sex=None if not sex or sex == "any" else sex,
        age_min=number(age_min, AGE_ANY[0]),
        age_max=number(age_max, AGE_ANY[1]),
        date_from=date(date_from, "'date from'"),
        date_to=date(date_to, "'date to'"),
        label_known=bool(label_known),
    )


class CaseLookup:
    """The UI's actions over one archive (one store, one encoder)."""

    def __init__(
        self,
        service,
        store=None,
        anchors_dir: Path | None = None,
        reports_dir: Path = Path("eval/reports"),
        thumbnail_px: int = 256,
        case_list_limit: int = 500,
        read_config=None,
        thumbnail_cache: int = 1024,
        read_threads: int = 2,
        thumbnail_dir: Path | None = None,
        audit=None,
    ):
        self.service = service
        # optional chexretrieve.audit.AuditLog: archived studies opened on screen are recorded
        # (searches are recorded by the search service itself)
        self.audit = audit
        self.store = store
        self.anchors_dir = anchors_dir
        self.reports_dir = Path(reports_dir)
        self.thumbnail_px = thumbnail_px
        self.case_list_limit = case_list_limit
        self.read_config = read_config
        self._thumbs: OrderedDict[int, np.ndarray] = OrderedDict()
        self._thumb_capacity = thumbnail_cache
        self.read_threads = read_threads
        # thumbnails persisted between runs (server-side only; None = memory only)
        self.thumbnail_dir = Path(thumbnail_dir) if thumbnail_dir is not None else None

    # ---------------------------------------------------------------------------- archive
    @property
    def gallery(self):
        return self.service.gallery

    def case_choices(self) -> list[tuple[str, int]]:
        """(label, image id) of the first archived cases, PHI-minimal labels."""
        gallery = self.gallery
        meta = gallery.metadata
        out = []
        for image_id in gallery.image_ids[: self.case_list_limit]:
            m = meta.loc[int(image_id)]
            label = (
                f"case {int(image_id)} · {format_text(m.get('view_position'))} · "
                f"{format_text(m.get('patient_sex'))} {format_age(m.get('patient_age_years'))} · "
                f"{format_date(m.get('study_date'))}"
            )
            out.append((label, int(image_id)))
        return out

    def view_choices(self) -> list[str]:
        views = self.gallery.metadata["view_position"].dropna().astype(str).str.upper()
        return sorted(v for v in views.unique() if v.strip())

    def _metadata(self, image_id: int) -> dict:
        gallery = self.service.gallery_containing(image_id)  # a result ingested a moment ago
        gallery.row_of(image_id)  # ValueError naming the id when unknown
        return gallery.metadata.loc[int(image_id)].to_dict()

    def _read_archived(self, image_id: int) -> np.ndarray | None:
        """Display pixels (float32 [0, 1]) of an archived image read from its source file."""
        from chexretrieve.dicom import read_radiograph

        path = self._metadata(image_id).get("source_path")
        if not isinstance(path, str) or not path or not os.path.isfile(path):
            return None
        try:
            return read_radiograph(path, self.read_config).pixels
        except ValueError:
            return None

    def _thumbnail_file(self, image_id: int) -> Path | None:
        """Where a thumbnail persists: named by id, pixel hash and size (never stale)."""
        if self.thumbnail_dir is None:
            return None
        digest = self._metadata(image_id).get("pixel_sha256")
        if not isinstance(digest, str) or not digest:
            return None
        return self.thumbnail_dir / f"{image_id}-{digest[:16]}-{self.thumbnail_px}.png"

    def _stored_thumbnails(self, image_ids: list[int]) -> dict[int, np.ndarray]:
        """Thumbnails written at ingest (``Store.read_thumbnails``, one query), at most
        ``thumbnail_px``; images without one (an older store) are left to ``_render_thumbnail``."""
        if self.store is None or not image_ids:
            return {}
        from chexretrieve.dicom import thumbnail_pixels

        found = {}
        for image_id, png in self.store.read_thumbnails(image_ids).items():
            try:
                found[image_id] = thumbnail(thumbnail_pixels(png), self.thumbnail_px)
            except ValueError:
                continue  # a damaged one: rendered from the file instead
        return found

    def _render_thumbnail(self, image_id: int) -> np.ndarray:
        from PIL import Image

        from chexretrieve.dicom import render_for_display

        stored = self._stored_thumbnails([image_id]).get(image_id)
        if stored is not None:
            return stored
        path = self._thumbnail_file(image_id)
        if path is not None and path.is_file():
            try:
                with Image.open(path, formats=["PNG"]) as image:
                    return np.asarray(image.convert("L"))
            except (OSError, ValueError):
                pass  # a damaged cache file is rendered again and replaced
        pixels = self._read_archived(image_id)
        if pixels is None:
            return placeholder(self.thumbnail_px)
        thumb = thumbnail(render_for_display(pixels), self.thumbnail_px)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
            Image.fromarray(thumb).save(tmp, format="PNG")
            os.replace(tmp, path)
        return thumb

    def _remember_thumbnail(self, image_id: int, thumb: np.ndarray) -> None:
        self._thumbs[image_id] = thumb
        while len(self._thumbs) > self._thumb_capacity:
            self._thumbs.popitem(last=False)

    def case_thumbnail(self, image_id: int) -> np.ndarray:
        """8-bit thumbnail of an archived case (cached; a placeholder when unreadable)."""
        image_id = int(image_id)
        if image_id in self._thumbs:
            self._thumbs.move_to_end(image_id)
            return self._thumbs[image_id]
        thumb = self._render_thumbnail(image_id)
        self._remember_thumbnail(image_id, thumb)
        return thumb

    def prefetch_thumbnails(self, image_ids) -> None:
        """Read the thumbnails not yet cached, each once, in ``read_threads`` threads."""
        missing = list(dict.fromkeys(int(i) for i in image_ids if int(i) not in self._thumbs))
        stored = self._stored_thumbnails(missing)
        for image_id, thumb in stored.items():
            self._remember_thumbnail(image_id, thumb)
        missing = [i for i in missing if i not in stored]
        if not missing:
            return
        if self.read_threads <= 1 or len(missing) == 1:
            rendered = [self._render_thumbnail(i) for i in missing]
        else:
            with ThreadPoolExecutor(self.read_threads) as pool:
                rendered = list(pool.map(self._render_thumbnail, missing))
        for image_id, thumb in zip(missing, rendered, strict=True):
            self._remember_thumbnail(image_id, thumb)

    # ------------------------------------------------------------------------------ query
    def _display_pixels(self, pixels: np.ndarray) -> np.ndarray:
        """Resize float display pixels so the longer side is 3 thumbnails (up or down)."""
        from PIL import Image

        limit = 3 * self.thumbnail_px
        rows, cols = pixels.shape
        scale = limit / max(rows, cols)
        pixels = np.asarray(pixels, dtype=np.float32)
        if abs(scale - 1) < 1e-3:
            return pixels
        size = (max(1, round(cols * scale)), max(1, round(rows * scale)))
        method = Image.Resampling.BOX if scale < 1 else Image.Resampling.BILINEAR
        resized = np.asarray(Image.fromarray(pixels).resize(size, method), dtype=np.float32)
        return np.clip(resized, 0.0, 1.0)

    def load_case(self, image_id: int | float | str | None, user: str | None = None) -> QueryImage:
        """The archived case ``image_id`` as the query; ValueError when it is not archived."""
        if image_id is None or str(image_id).strip() == "":
            raise ValueError("enter an archived case id or pick one from the list")
        try:
            image_id = int(float(image_id))
        except ValueError:
            raise ValueError(f"case id must be a whole number, not {image_id!r}") from None
        meta = self._metadata(image_id)
        if self.audit is not None:
            self.audit.view(user, image_id, meta.get("study_uid"), what="query")
        pixels = self._read_archived(image_id)
        notes: tuple[str, ...] = ()
        if pixels is None:
            pixels = placeholder(self.thumbnail_px).astype(np.float32) / 255.0
            notes = ("the archived file is not readable here; its stored embedding is searched",)
        return QueryImage(
            source="case",
            name=f"case {image_id}",
            pixels=self._display_pixels(pixels),
            metadata=meta,
            case_id=image_id,
            notes=notes,
        )

    def load_upload(self, path: str | os.PathLike[str] | None, delete: bool = True) -> QueryImage:
        """An uploaded DICOM / PNG / JPEG as the query, embedded now.

        ``delete`` removes the uploaded temporary file once read, so patient data does not
        linger on the server. Unreadable files raise ValueError (``RejectedFile``) with the reason.
        """
        from chexretrieve.dicom import read_radiograph

        if path is None:
            raise ValueError("choose a DICOM, PNG or JPEG file to upload")
        try:
            radiograph = read_radiograph(path, self.read_config)
        finally:
            if delete:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        encoder = self.service.encoder
        if encoder is None:
            raise ValueError("this server has no encoder loaded; search by an archived case")
        embedding = np.asarray(encoder.embed_images([radiograph.pixels])[0], dtype=np.float32)
        m = radiograph.metadata
        meta = {
            "view_position": m.view_position,
            "patient_sex": m.patient_sex,
            "patient_age_years": m.patient_age_years,
            "study_date": m.study_date,
            "modality": m.modality,
            "body_part": m.body_part,
            "manufacturer": m.manufacturer,
            "photometric": m.photometric,
            "pixel_rows": m.rows,
            "pixel_columns": m.columns,
            "source_format": m.source_format,
            "split": None,
        }
        return QueryImage(
            source="upload",
            name="the uploaded image",
            pixels=self._display_pixels(radiograph.pixels),
            metadata=meta,
            embedding=embedding,
            notes=tuple(radiograph.warnings),
        )

    @staticmethod
    def render_query(query: QueryImage | None, center: float = 0.5, width: float = 1.0):
        """The query's 8-bit display pixels under a window (display units, fractions of 0..1)."""
        from chexretrieve.dicom import render_for_display

        if query is None:
            return None
        return render_for_display(query.pixels, center, max(float(width), 1e-3))

    @staticmethod
    def query_details(query: QueryImage | None) -> str:
        if query is None:
            return "<p class='cx-note'>No query yet: pick an archived case or upload an image.</p>"
        title = f"Query: {query.name}"
        return details_html(title, query.metadata, query.notes)

    # ----------------------------------------------------------------------------- search
    def anchor_set_choices(self, finding: str) -> tuple[list[str], str]:
        """Every version of the finding's anchor sets (newest first) and the default (latest)."""
        from chexretrieve.anchors import find_anchor_sets, latest_anchor_set

        finding = canonical_finding(finding)
        sets = find_anchor_sets(self.anchors_dir, finding=finding)
        keys = [s.key for s in sorted(sets, key=lambda s: (s.variant or "", -s.version))]
        default = latest_anchor_set(finding, root=self.anchors_dir).key
        return keys, default

    def _request(
        self,
        query: QueryImage,
        settings: SearchSettings,
        geometry: str,
        relevant=(),
        not_relevant=(),
    ):
        return SearchRequest(
            finding=settings.finding,
            geometry=geometry,
            case_id=query.case_id if query.source == "case" else None,
            image_embedding=query.embedding if query.source == "upload" else None,
            text=(settings.text or "").strip() or None,
            anchor_set=settings.anchor_set or None,
            top_k=settings.top_k,
            filters=settings.filters,
            relevant=tuple(int(i) for i in relevant),
            not_relevant=tuple(int(i) for i in not_relevant),
        )

    def search(
        self,
        query: QueryImage | None,
        settings: SearchSettings,
        relevant=(),
        not_relevant=(),
        user: str | None = None,
    ) -> tuple[RankingView, RankingView]:
        """(cosine ranking, ranking under the chosen geometry), with feedback applied to both."""
        if query is None:
            raise ValueError("pick an archived case or upload an image first")
        geometry_name(settings.geometry)  # ValueError naming the valid ones (either spelling)
        results = [
            self.service.search(
                self._request(query, settings, geometry, relevant, not_relevant), user=user
            )
            for geometry in (REFERENCE_GEOMETRY, settings.geometry)
        ]
        self.prefetch_thumbnails(h.image_id for result in results for h in result.hits)
        cos, geo = (self._view(result, relevant, not_relevant) for result in results)
        return cos, geo

    def _view(self, result: SearchResult, relevant, not_relevant) -> RankingView:
        finding = result.finding
        items = [
            (self.case_thumbnail(h.image_id), hit_caption(h, relevant, not_relevant))
            for h in result.hits
        ]
        if result.geometry == REFERENCE_GEOMETRY:
            title = f"no anchors · {result.candidates} candidates"
        else:
            title = f"{result.geometry} · {result.anchor_set} · {result.candidates} candidates"
        return RankingView(
            title=title,
            items=items,
            image_ids=tuple(h.image_id for h in result.hits),
            table_html=hits_table_html(result.hits, finding, relevant, not_relevant),
            result=result,
        )

    def explain(self, query: QueryImage | None, settings: SearchSettings, image_id: int) -> str:
        """Escaped HTML: the anchor sentences that make the query and the result close."""
        if query is None:
            raise ValueError("pick a query first")
        request = self._request(query, settings, settings.geometry)
        explanation = self.service.explain(request, int(image_id))
        key = self.service.anchors.anchor_set(
            canonical_finding(settings.finding), settings.anchor_set or None
        ).key
        return explanation_html(
            explanation, query.name, int(image_id), canonical_finding(settings.finding), key
        )

    def result_details(self, image_id: int, user: str | None = None) -> str:
        meta = self._metadata(int(image_id))
        if self.audit is not None:
            self.audit.view(user, int(image_id), meta.get("study_uid"), what="details")
        return details_html(f"Result: case {int(image_id)}", meta)

    @staticmethod
    def feedback_text(relevant, not_relevant) -> str:
        if not relevant and not not_relevant:
            return "No feedback yet: select a result, then mark it relevant or not relevant."
        rel = ", ".join(str(i) for i in sorted(relevant)) or "none"
        non = ", ".join(str(i) for i in sorted(not_relevant)) or "none"
        return f"Relevant: {esc(rel)} · not relevant: {esc(non)} (both rankings re-ranked)"
