"""What the case-lookup UI does, as plain Python (no Gradio): the Gradio layer only wires it up.

``CaseLookup`` holds a :class:`~chexretrieve.search.service.SearchService` and the store. Its
methods take and return plain values (ids, arrays, strings, small dataclasses), so the tests drive
them directly. Archived images are read on the server and handed to the browser as pixels: no file
path ever leaves the server. Every rejection is a ``ValueError`` whose text says what to do.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from chexretrieve.anchors.broad_prior import prior_line
from chexretrieve.findings import canonical_finding
from chexretrieve.geometry import geometry_name
from chexretrieve.search.duplicates import content_signature
from chexretrieve.search.explain import report_side
from chexretrieve.search.service import SearchRequest
from chexretrieve.ui.access import AccessControl
from chexretrieve.ui.case_picker import (
    PickerPage,
    case_label,
    columns_page,
    gallery_page,
    page_summary,
    parse_case_id,
)
from chexretrieve.ui.density_banner import density_banner_html, result_concepts_html
from chexretrieve.ui.filters import AGE_ANY, parse_filters  # noqa: F401 - re-exported
from chexretrieve.ui.input_limits import (
    MAX_ANCHOR_KEY,
    MAX_FREE_TEXT,
    MAX_ID_DIGITS,
    MAX_PICKER_TEXT,
    capped,
)
from chexretrieve.ui.lookup_values import (  # noqa: F401 - re-exported
    QueryImage,
    ResultsPage,
    SearchSettings,
)
from chexretrieve.ui.radiology_reports import ReportTexts
from chexretrieve.ui.rare_cases import RARE_FIRST, rare_case_rows
from chexretrieve.ui.render import details_html, esc, explanation_html, placeholder
from chexretrieve.ui.results_html import (
    ResultRow,
    labels_html,
    percentiles,
    png_data_uri,
    ranks,
    report_html,
    results_html,
    similarity_legend,
    standing_percentiles,
)
from chexretrieve.ui.similarity_figure import make_figure, unlike_reason
from chexretrieve.ui.thumbnails import ArchiveThumbnails
from chexretrieve.ui.upload_errors import upload_message, upload_name

#: what marking a result does, said under the feedback buttons
FEEDBACK_RULE = (
    "A case marked not relevant leaves the results and cases like it move down; cases like "
    "those marked relevant move up (the query moves towards the relevant cases and away from "
    "the not relevant ones)."
)

#: the anchor-free geometry offered as the optional baseline column
BASELINE_GEOMETRY = "cosine"

#: progress callback of a long action: (fraction done 0..1, what is being done now)
Progress = Callable[[float, str], None]


class CaseLookup(ArchiveThumbnails):
    """The UI's actions over one archive (one store, one encoder)."""

    def __init__(
        self,
        service,
        store=None,
        anchors_dir: Path | None = None,
        reports_dir: Path = Path("eval/reports"),
        thumbnail_px: int = 256,
        case_page_size: int = 50,
        read_config=None,
        thumbnail_cache: int = 1024,
        read_threads: int = 2,
        thumbnail_dir: Path | None = None,
        audit=None,
        report_texts: ReportTexts | None = None,
        access: AccessControl | None = None,
    ):
        super().__init__(thumbnail_px, read_config, thumbnail_cache, read_threads, thumbnail_dir)
        self.service = service
        # optional chexretrieve.audit.AuditLog: archived studies opened on screen are recorded
        # (searches are recorded by the search service itself)
        self.audit = audit
        self.store = store
        # who may do what (chexretrieve.ui.access): handlers call access.require(request, action)
        self.access = access or AccessControl()
        self.anchors_dir = anchors_dir
        self.reports_dir = Path(reports_dir)
        self.case_page_size = case_page_size
        self.report_texts = report_texts or ReportTexts(
            stored=getattr(store, "report_for_image", None),
            stored_many=getattr(store, "reports_for_images", None),
            revision=getattr(store, "archive_revision", None),
        )
        self._serials = itertools.count(1)  # numbers the results pages this server sends
        # (user, query study uid, [(image id, study uid)]) -> {image id: "Open in viewer" link};
        # set by launch_app when the OHIF viewer is installed (chexretrieve.ui.viewer_links)
        self.viewer_links = None

    # ---------------------------------------------------------------------------- archive
    @property
    def gallery(self):
        return self.service.gallery

    def _metadata(self, image_id: int) -> dict:
        gallery = self.service.gallery_containing(image_id)  # a result ingested a moment ago
        gallery.row_of(image_id)  # ValueError naming the id when unknown
        return gallery.metadata_of(int(image_id))

    def labels_of(self, image_id: int) -> dict:
        gallery = self.service.gallery_containing(image_id)
        return gallery.labels_of(int(image_id))

    def report_of(self, image_id: int) -> str | None:
        return self.report_texts.report_for(self._metadata(image_id).get("source_path"), image_id)

    def view_choices(self) -> list[str]:
        views = {str(v).strip().upper() for v in self.gallery.category_values("view_position")}
        return sorted(v for v in views if v)

    def case_page(
        self, text: str | None = None, finding: str | None = None, status: str | None = None,
        page: int = 0, user: str | None = None, record: bool = True,
    ) -> PickerPage:  # fmt: skip
        """One page of the case picker: the case whose id or accession number is exactly
        ``text`` (no prefix search: the picker is no oracle of accession numbers), or every case,
        whose ``finding`` label has ``status`` ("any"/None = every case), with their labels.
        Each page listed is audited (``view`` with ``what="picker"``: the query and the cases);
        ``record=False`` only for a count no one sees listed (the page layout's summary)."""
        text = capped(text, "the picker's id or accession", MAX_PICKER_TEXT).strip()
        status = None if status in (None, "", "any") else status
        finding = canonical_finding(finding) if finding else None
        size = self.case_page_size
        page = max(0, min(int(page or 0), 10**9))
        gallery = self.gallery
        for _ in range(2):  # a page past the end (the archive shrank, a narrower filter): last one
            if status == RARE_FIRST:  # an order, not a label filter (chexretrieve.ui.rare_cases)
                total, rows, _ = rare_case_rows(
                    self.service, gallery, text, finding, page * size, size
                )
            elif getattr(gallery, "mapped", False):  # an archive index: its columns
                total, rows = columns_page(gallery, self.store, text, finding, status,
                                           page * size, size)  # fmt: skip
            elif self.store is not None:
                found = self.store.find_cases(
                    text or None, finding if status else None, status, gallery.encoder_id,
                    offset=page * size, limit=size,
                )  # fmt: skip
                total = found.total
                rows = [
                    (c.image_id, dataclasses.asdict(c), c.labels.get(finding)) for c in found.cases
                ]
            else:
                total, rows = gallery_page(gallery, text, finding, status, page * size, size)
            pages = max(1, -(-total // size))
            if page < pages:
                break
            page = pages - 1
        if self.audit is not None and record:
            picked = {"text": text or None, "finding": finding, "status": status, "page": page}
            listed = [int(i) for i, _, _ in rows]
            self.audit.record("view", user, what="picker", picker=picked, images=listed)
        choices = [(case_label(i, meta, finding, label), int(i)) for i, meta, label in rows]
        summary = page_summary(total, page, size, text, status)
        return PickerPage(choices, summary, page, pages, total)

    def case_choices(self) -> list[tuple[str, int]]:
        """(label, image id) of the picker's first page (PHI-minimal labels)."""
        return self.case_page().choices

    def resolve_case(self, text: object) -> int:
        """The image id a typed case id or accession number names; ValueError otherwise."""
        number = parse_case_id(text)
        if number is not None:
            return number
        accession = str(text).strip()
        if self.store is None:
            raise ValueError(f"no case with id or accession number {accession!r}")
        page = self.store.find_cases(accession, encoder_id=self.gallery.encoder_id, limit=50)
        exact = [
            c.image_id
            for c in page.cases
            if (c.accession_number or "").upper() == accession.upper()
        ]
        if len(exact) == 1:
            return int(exact[0])
        if exact:
            listed = ", ".join(str(i) for i in exact[:8])
            raise ValueError(
                f"that accession number holds {len(exact)} images (cases {listed}): "
                "type one case id"
            )
        raise ValueError(
            f"no case with id or accession number {accession!r}; "
            "browse the list or check the number"
        )

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
        """The archived case ``image_id`` (a case id, or an accession number naming one image) as
        the query; ValueError when it is not a whole number or not archived."""
        if isinstance(image_id, float) and not float(image_id).is_integer():
            raise ValueError(f"a case id is a whole number such as 12, not {image_id!r}")
        if isinstance(image_id, int | np.integer | float) and not isinstance(image_id, bool):
            if abs(image_id) >= 10**MAX_ID_DIGITS:
                raise ValueError(f"a case id has at most {MAX_ID_DIGITS} digits")
            image_id = str(int(image_id))
        image_id = self.resolve_case(image_id)
        gallery = self.service.gallery_containing(image_id)
        if image_id not in gallery:
            ids = gallery.image_ids
            known = f"ids {int(ids.min())}–{int(ids.max())}" if len(ids) else "no cases"
            raise ValueError(
                f"there is no case {image_id} in this archive ({len(ids):,} cases, {known}); "
                "type another id or browse the list"
            )
        meta = self._metadata(image_id)
        if self.audit is not None:
            self.audit.view(user, image_id, meta.get("study_uid"), what="query")
        notes: tuple[str, ...] = ()
        stored = self._stored_thumbnails([image_id]).get(image_id)
        if stored is not None:  # the preview is the thumbnail written at ingest: no decoding
            preview = stored.astype(np.float32) / 255.0
        else:
            pixels = self._read_archived(image_id)
            if pixels is None:
                pixels = placeholder(self.thumbnail_px).astype(np.float32) / 255.0
                notes = (
                    "the archived file is not readable here; its stored embedding is searched",
                )
            preview = self._display_pixels(pixels)
        return QueryImage(
            source="case",
            name=f"case {image_id}",
            pixels=preview,
            metadata=meta,
            case_id=image_id,
            notes=notes,
            labels=self.labels_of(image_id),
            report=self.report_texts.report_for(meta.get("source_path"), image_id),
        )

    def load_upload(
        self, path: str | os.PathLike[str] | None, delete: bool = True, viewer_px: int = 1024
    ) -> QueryImage:
        """An uploaded DICOM / PNG / JPEG as the query, embedded now.

        ``delete`` removes the uploaded temporary file once read, so patient data does not
        linger on the server. An unreadable file raises ValueError saying what is wrong with the
        upload (never the archive's advice of ingest).
        """
        from chexretrieve.dicom import RejectedFile, read_pixel_values, read_radiograph

        if path is None:
            raise ValueError("choose a DICOM, PNG or JPEG file to upload")
        name = Path(path).name
        try:
            radiograph = read_radiograph(path, self.read_config)
            values = read_pixel_values(path, self.read_config, viewer_px)
        except RejectedFile as exc:
            raise ValueError(upload_message(name, exc.reason, exc.message)) from None
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
            name=upload_name(name),
            pixels=self._display_pixels(radiograph.pixels),
            metadata=meta,
            embedding=embedding,
            notes=tuple(radiograph.warnings),
            values=values,
            study_uid=m.study_uid if m.source_format == "dicom" else None,
            pixel_sha256=radiograph.pixel_sha256,
            signature=content_signature(radiograph.pixels),
        )

    @staticmethod
    def render_query(query: QueryImage | None):
        """The query's 8-bit preview (its default display)."""
        from chexretrieve.dicom import render_for_display

        return None if query is None else render_for_display(query.pixels)

    @staticmethod
    def query_preview_html(query: QueryImage | None) -> str:
        """The query's preview as an in-page ``data:`` PNG (as thumbnails are): no file of it is
        ever written for the browser to fetch, so no other client can fetch it."""
        if query is None:
            return "<div class='cx-query-preview cx-query-empty'></div>"
        uri = png_data_uri(CaseLookup.render_query(query), compress_level=3)
        return (
            f"<div class='cx-query-preview'><img class='cx-query-img' src='{uri}' "
            f"alt='preview of {esc(query.name)}'></div>"
        )

    @staticmethod
    def query_details(query: QueryImage | None, finding: str | None = None) -> str:
        """Escaped HTML: the query's PHI-minimal details, labels and report."""
        if query is None:
            return "<p class='cx-note'>No query yet: pick an archived case or upload an image.</p>"
        html = details_html(f"Query: {query.name}", query.metadata, query.notes)
        if query.source == "upload":
            return html + "<p class='cx-note'>An upload has no labels or report here.</p>"
        return (
            html + "<p class='cx-sub'>Labels</p>" + labels_html(query.labels, finding)
            + "<p class='cx-sub'>Report</p>" + report_html(query.report)
        )  # fmt: skip

    # ----------------------------------------------------------------------------- search
    def anchor_set_choices(self, finding: str) -> tuple[list[tuple[str, str]], str]:
        """Every version of the finding's anchor sets ((label, key), each variant newest first)
        and the default: the finding's latest set, the rule search uses when none is named."""
        from chexretrieve.anchors import find_anchor_sets, latest_anchor_set

        finding = canonical_finding(finding)
        sets = find_anchor_sets(self.anchors_dir, finding=finding)
        keys = [s.key for s in sorted(sets, key=lambda s: (s.variant or "", -s.version))]
        latest = latest_anchor_set(finding, root=self.anchors_dir).key
        # the version searches use: the archive index serves the previous one until it has
        # built a newly published one
        index = getattr(self.service, "index", None)
        default = (index.serving_key(finding) if index is not None else None) or latest
        if default not in keys:
            default = latest
        labels = {latest: "latest", default: "served"} if default != latest else {latest: "latest"}
        return [(f"{k} · {labels[k]}" if k in labels else k, k) for k in keys], default

    def _request(self, query: QueryImage, settings: SearchSettings, geometry: str,
                 relevant=(), not_relevant=()) -> SearchRequest:  # fmt: skip
        # caps before any work: an oversized text is neither embedded nor audited
        text = capped(settings.text, "the free text", MAX_FREE_TEXT).strip() or None
        anchor_set = capped(settings.anchor_set, "the anchor set", MAX_ANCHOR_KEY) or None
        return SearchRequest(
            finding=settings.finding,
            geometry=geometry,
            case_id=query.case_id if query.source == "case" else None,
            image_embedding=query.embedding if query.source == "upload" else None,
            text=text,
            anchor_set=anchor_set,
            top_k=settings.top_k,
            filters=settings.filters,
            relevant=tuple(int(i) for i in relevant),
            not_relevant=tuple(int(i) for i in not_relevant),
            # a case marked not relevant is no longer a result (FEEDBACK_RULE)
            exclude_ids=tuple(int(i) for i in not_relevant),
            query_study_uid=query.study_uid if query.source == "upload" else None,
            query_pixel_sha256=query.pixel_sha256 if query.source == "upload" else None,
            query_signature=query.signature if query.source == "upload" else None,
        )

    def search(
        self,
        query: QueryImage | None,
        settings: SearchSettings,
        relevant=(),
        not_relevant=(),
        user: str | None = None,
        selected: int | None = None,
        baseline: bool = False,
        progress: Progress | None = None,
    ) -> ResultsPage:
        """One ranking under the chosen geometry (feedback applied), each result with its
        percentile among the candidates and, with ``baseline``, its rank under plain cosine.
        ``progress`` hears each step as it starts (a first use fits the geometry: the slow part)."""
        step = progress or (lambda fraction, what: None)
        if query is None:
            raise ValueError("no query yet: pick an archived case or upload an image, then search")
        name = geometry_name(settings.geometry)  # ValueError naming the valid ones
        finding = canonical_finding(settings.finding)
        request = self._request(query, settings, name.name, relevant, not_relevant)
        size = len(self.gallery)
        if name.needs_anchors:
            step(0.05, f"{name.display}: embedding the anchors, fitting and ranking {size:,} "
                       "cases (slow only on first use)")  # fmt: skip
        else:
            step(0.05, f"Cosine: ranking {size:,} cases")
        result = self.service.search(request, user=user)
        gallery = self.service.gallery_containing(*(h.image_id for h in result.hits))
        hit_rows = [gallery.row_of(h.image_id) for h in result.hits]
        if result.standing is not None:  # the ranking's own exact count: no second scan
            pct = standing_percentiles(result.standing, result.candidates)
        else:  # an ANN or sharded ranking: every candidate's score, here
            step(0.6, "Percentiles among the candidates")
            scores, eligible = self.service.gallery_scores(request)
            if len(scores) != len(gallery):  # the gallery grew after the ranking (ingest)
                gallery = self.service.current_gallery()
                hit_rows = [gallery.row_of(h.image_id) for h in result.hits]
                if len(scores) != len(gallery):
                    scores, eligible = self.service.gallery_scores(request)
            pct = percentiles(scores, eligible, hit_rows)
        shown_baseline = bool(baseline) and name.kind != BASELINE_GEOMETRY
        base_ranks = base_pct = [None] * len(hit_rows)
        if shown_baseline:
            step(0.7, "Cosine baseline")
            base = dataclasses.replace(request, geometry=BASELINE_GEOMETRY)
            cos_scores, cos_eligible = self.service.gallery_scores(base)
            base_ranks = ranks(cos_scores, cos_eligible, hit_rows)
            base_pct = percentiles(cos_scores, cos_eligible, hit_rows)
        step(0.75, "The chance beside each result (measured once per geometry)")
        figure, note = self._figure(request, query, finding, result.density)
        step(0.8, "Thumbnails")
        self.prefetch_thumbnails(h.image_id for h in result.hits)
        self.report_texts.prefetch(h.image_id for h in result.hits)
        rows = tuple(
            ResultRow(
                hit=hit,
                percentile=pct[i],
                thumbnail_uri=self.thumbnail_uri(hit.image_id),
                report=self.report_texts.report_for(
                    hit.metadata.get("source_path"), hit.image_id, prefetched=True
                ),
                baseline_rank=base_ranks[i],
                baseline_percentile=base_pct[i],
            )
            for i, hit in enumerate(result.hits)
        )
        anchors = f" · anchors {result.anchor_set}" if name.needs_anchors else " · no anchors"
        text = (settings.text or "").strip()
        mixed = f" + free text “{text}”" if text else ""
        title = (
            f"{finding} · {name.display}{anchors} · {result.candidates:,} candidate cases · "
            f"query: {query.name}{mixed}"
        )
        legend = similarity_legend(name.display, result.candidates, shown_baseline, figure)
        if result.prior:  # which broad sets the posterior geometry's prior holds
            legend += f" Prior of {name.display}: {prior_line(result.prior)}."
        links = None
        if self.viewer_links is not None:
            query_study = self._metadata(query.case_id).get("study_uid") if (
                query.case_id is not None) else None  # fmt: skip
            links = self.viewer_links(user, query_study, [
                (h.image_id, h.metadata.get("study_uid")) for h in result.hits])  # fmt: skip
        html = results_html(list(rows), title, finding, legend, selected, relevant, not_relevant,
                            shown_baseline, next(self._serials), links, note,
                            figure)  # fmt: skip
        html = density_banner_html(result.density) + html  # OOD warning / typicality line
        step(1.0, "Done")
        return ResultsPage(result, rows, title, legend, html, shown_baseline)

    def _figure(self, request, query: QueryImage, finding: str, density):
        """(the chance figure or None, a note when the query is unlike the archive and no
        archive density speaks for it). The nearest archived image is measured only when no
        archive density decides (its scan of every embedding is 2 GB at a million images)."""
        try:
            calibration = self.service.rank_calibration(request, request.top_k)
            if hasattr(density, "log_density"):
                nearest = float("nan")  # the density's own verdict decides (unlike_reason)
            else:
                nearest = self.service.nearest_cosine(request)
        except ValueError:
            return None, ""
        low = float("nan") if calibration is None else calibration.nearest_low
        unlike = unlike_reason(density, nearest, low)
        labels = query.labels if query.source == "case" else None
        figure = make_figure(calibration, finding, labels, unlike)
        note = ""
        if unlike and not hasattr(density, "log_density"):
            note = (
                f"{query.name[0].upper() + query.name[1:]} is unlike this archive: {unlike}. "
                "The ranking was learned on archived cases and may not hold for it."
            )
        return figure, note

    def explain(self, query: QueryImage | None, settings: SearchSettings, image_id: int) -> str:
        """Escaped HTML: the anchor sentences that make the query and the result close."""
        if query is None:
            raise ValueError("pick a query first")
        request = self._request(query, settings, settings.geometry)
        finding = canonical_finding(settings.finding)
        side = report_side(query.report, finding)  # the query's finding side, from its report
        explanation = self.service.explain(request, int(image_id), side=side)
        key = self.service.anchors.anchor_set(finding, settings.anchor_set or None).key
        html = explanation_html(explanation, query.name, int(image_id), finding, key, side)
        if not geometry_name(settings.geometry).needs_anchors:
            html += (
                "<p class='cx-note'>Cosine ranked these results without anchors; the sentences "
                f"above show how the {esc(finding)} anchor set sees the pair.</p>"
            )
        return html

    def result_details(
        self, image_id: int, user: str | None = None, finding: str | None = None,
        what: str | None = "details",
    ) -> str:  # fmt: skip
        """Escaped HTML: a result's details, labels and report, recorded as a view ``what``
        (None: not recorded, for a panel beside a view recorded already)."""
        image_id = int(image_id)
        meta = self._metadata(image_id)
        if self.audit is not None and what is not None:
            self.audit.view(user, image_id, meta.get("study_uid"), what=what)
        return (
            details_html(f"Result: case {image_id}", meta)
            + "<p class='cx-sub'>Labels</p>" + labels_html(self.labels_of(image_id), finding)
            + "<p class='cx-sub'>Report</p>"
            + report_html(self.report_texts.report_for(meta.get("source_path"), image_id))
            + result_concepts_html(self.service, image_id)
        )  # fmt: skip

    @staticmethod
    def feedback_text(relevant, not_relevant) -> str:
        if not relevant and not not_relevant:
            return (
                "No feedback yet: select a result, then mark it relevant or not relevant. "
                + FEEDBACK_RULE
            )
        rel = ", ".join(str(i) for i in sorted(relevant)) or "none"
        non = ", ".join(str(i) for i in sorted(not_relevant)) or "none"
        return f"Relevant: {esc(rel)} · not relevant: {esc(non)}. {FEEDBACK_RULE}"
