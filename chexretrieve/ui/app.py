"""The Gradio layer of the case-lookup UI: layout and event wiring only.

All work happens in :mod:`chexretrieve.ui.handlers`, :mod:`chexretrieve.ui.curation` and
:mod:`chexretrieve.ui.reports`; this module turns their plain results into component updates.
It is the project's only Gradio importer.
"""

from __future__ import annotations

import functools
import os

import gradio as gr

from chexretrieve.findings import FINDINGS
from chexretrieve.search.features import GEOMETRY_CHOICES
from chexretrieve.ui.config import UIConfig
from chexretrieve.ui.curation import CurationDesk, sentences_html, set_as_text
from chexretrieve.ui.handlers import AGE_ANY, CaseLookup, SearchSettings, parse_filters
from chexretrieve.ui.render import esc
from chexretrieve.ui.reports import load_report, no_report_markdown, report_choices

DEFAULT_FINDING = "Pleural Effusion"
NO_SELECTION = (
    "<p class='cx-note'>Select a result in either ranking to see which anchor sentences make it "
    "close to the query.</p>"
)
UPLOAD_TYPES = [".dcm", ".dicom", ".dic", ".png", ".jpg", ".jpeg"]

CSS = """
.cx-header h1 {font-size: 1.4rem; margin: 0; font-weight: 650; letter-spacing: -0.01em}
.cx-header p {margin: 0.1rem 0 0; color: var(--body-text-color-subdued); font-size: 0.9rem}
.cx-notice {background: #fff8e1; border: 1px solid #f3d27a; border-radius: 6px;
  padding: 0.35rem 0.7rem; font-size: 0.82rem; color: #6b5200}
.cx-note {color: var(--body-text-color-subdued); font-size: 0.84rem; margin: 0.2rem 0}
.cx-sub {font-weight: 600; font-size: 0.86rem; margin: 0.7rem 0 0.2rem}
table.cx-hits, .cx-details table {border: none !important; border-collapse: collapse;
  width: 100%; font-size: 0.82rem; margin: 0}
table.cx-hits th, table.cx-hits td {border: none !important;
  border-bottom: 1px solid var(--border-color-primary) !important; padding: 0.22rem 0.4rem;
  text-align: left; white-space: nowrap; background: transparent}
table.cx-hits tr, .cx-details tr {border: none !important; background: transparent}
table.cx-hits th {font-weight: 600; color: var(--body-text-color-subdued); font-size: 0.78rem}
table.cx-hits td.cx-text {white-space: normal; width: 100%}
td.cx-num {font-variant-numeric: tabular-nums}
.cx-label {display: inline-block; border-radius: 999px; padding: 0 0.5rem; font-size: 0.76rem;
  border: 1px solid transparent; line-height: 1.35rem}
.cx-positive {background: #fde8e8; color: #9b1c1c; border-color: #f8b4b4}
.cx-negative {background: #e6f4ea; color: #1e6b34; border-color: #a8dab5}
.cx-uncertain {background: #fff4d6; color: #8a5a00; border-color: #f3d27a}
.cx-unknown {background: #f1f3f5; color: #5f6b76; border-color: #dde2e6}
.cx-ranking-title {font-size: 0.92rem; padding: 0.1rem 0.2rem}
.cx-details-title {font-weight: 600; font-size: 0.92rem; margin-bottom: 0.3rem}
.cx-details table {border-collapse: collapse; width: 100%; font-size: 0.84rem}
.cx-details th, .cx-details td {border: none !important; padding: 0.12rem 0.3rem; text-align: left;
  background: transparent}
.cx-details th {font-weight: 500; color: var(--body-text-color-subdued); width: 42%}
.cx-explanation table.cx-hits td.cx-text {white-space: normal}
.cx-results .caption-label {font-size: 0.68rem; padding: 1px 5px; bottom: 4px}
.cx-scroll {max-height: 720px; overflow-y: auto}
.cx-empty {color: var(--body-text-color-subdued); font-style: italic}
"""


def local_theme():
    """A calm theme with local fonts only (no web-font download: the app works offline)."""
    return gr.themes.Soft(
        primary_hue="blue",
        neutral_hue="slate",
        font=("ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"),
        font_mono=("ui-monospace", "SFMono-Regular", "Menlo", "monospace"),
    )


def _ranking_title(kind: str, title: str) -> str:
    return f"<div class='cx-ranking-title'><b>{esc(kind)}</b> · {esc(title)}</div>"


def _fail(exc: Exception) -> gr.Error:
    """A Gradio error toast whose text is escaped (messages may quote file content)."""
    return gr.Error(esc(str(exc)), print_exception=False)


def _who(request: gr.Request | None) -> str:
    """For the audit trail: the signed-in user, else 'anonymous@<client address>'."""
    if request is None:
        return "anonymous"
    if getattr(request, "username", None):
        return str(request.username)
    client = getattr(request, "client", None)
    return f"anonymous@{getattr(client, 'host', None) or 'unknown'}"


def _user_errors(fn):
    """Turn ValueError (bad input, unreadable file) into an escaped error toast."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise _fail(exc) from None

    return wrapper


def _ranking_column(prefix: str) -> tuple[gr.HTML, gr.Gallery, gr.HTML]:
    """Title, thumbnail gallery and table of one ranking (cosine or the anchor geometry), with
    elem_ids ``{prefix}-title``, ``{prefix}-gallery`` and ``{prefix}-table``."""
    with gr.Column(min_width=320):
        title = gr.HTML(elem_id=f"{prefix}-title")
        gallery = gr.Gallery(
            show_label=False,
            columns=4,
            height=400,
            object_fit="contain",
            allow_preview=False,
            format="png",
            buttons=[],
            elem_classes=["cx-results"],
            elem_id=f"{prefix}-gallery",
        )
        table = gr.HTML(elem_id=f"{prefix}-table")
    return title, gallery, table


def build_app(
    lookup: CaseLookup, curation: CurationDesk | None = None, config: UIConfig | None = None
) -> gr.Blocks:
    """The whole UI over one archive; ``serve_app`` launches it, tests may launch it themselves."""
    config = config or UIConfig()
    curation = curation or CurationDesk(anchors_dir=lookup.anchors_dir)
    anchor_keys, anchor_default = lookup.anchor_set_choices(DEFAULT_FINDING)
    private = {"api_visibility": "private"}

    purge = (min(config.upload_max_age_s, 60), config.upload_max_age_s)  # (every s, older than s)
    with gr.Blocks(title="chexretrieve · case lookup", fill_width=True, delete_cache=purge) as app:
        gr.HTML(
            "<div class='cx-header'><h1>chexretrieve · case lookup</h1>"
            "<p>Prior chest radiographs that resemble a study with respect to one finding."
            "</p></div>"
        )
        query_state = gr.State(None)
        ids_state = gr.State(((), ()))  # image ids shown in (cosine, anchor) galleries
        selected_state = gr.State(None)  # image id of the selected result
        relevant_state = gr.State(())
        not_relevant_state = gr.State(())

        with gr.Tabs():
            with gr.Tab("Case lookup", id="lookup"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=1, min_width=300):
                        case_pick = gr.Dropdown(
                            choices=lookup.case_choices(),
                            value=None,
                            label="Archived case",
                            info="Type to filter; the first cases of the archive are listed.",
                            elem_id="case-pick",
                        )
                        with gr.Row():
                            case_id = gr.Number(
                                label="…or any case id", precision=0, elem_id="case-id", scale=3
                            )
                            load_btn = gr.Button("Load", size="md", scale=1, elem_id="load-case")
                        upload = gr.File(
                            label="…or upload a DICOM / PNG / JPEG",
                            file_types=UPLOAD_TYPES,
                            type="filepath",
                            height=110,
                            elem_id="upload",
                        )
                        query_image = gr.Image(
                            label="Query",
                            type="numpy",
                            image_mode="L",
                            format="png",
                            interactive=False,
                            buttons=["fullscreen"],
                            height=340,
                            elem_id="query-image",
                        )
                        center = gr.Slider(
                            0.0, 1.0, 0.5, step=0.01, label="Window centre", elem_id="win-center"
                        )
                        width = gr.Slider(
                            0.05, 1.0, 1.0, step=0.01, label="Window width", elem_id="win-width"
                        )
                        query_info = gr.HTML(CaseLookup.query_details(None), elem_id="query-info")
                    with gr.Column(scale=3):
                        with gr.Row():
                            finding = gr.Dropdown(
                                list(FINDINGS),
                                value=DEFAULT_FINDING,
                                label="Finding",
                                elem_id="finding",
                            )
                            anchor_set = gr.Dropdown(
                                anchor_keys,
                                value=anchor_default,
                                label="Anchor set version",
                                elem_id="anchor-set",
                            )
                            geometry = gr.Dropdown(
                                list(GEOMETRY_CHOICES),
                                value="softmax",
                                label="Geometry",
                                elem_id="geometry",
                            )
                            free_text = gr.Textbox(
                                label="Free text (optional)",
                                placeholder="e.g. small left effusion",
                                elem_id="free-text",
                            )
                        with gr.Accordion("Filters", open=False, elem_id="filters"):
                            with gr.Row():
                                views = gr.CheckboxGroup(
                                    lookup.view_choices(), label="View", elem_id="f-views"
                                )
                                sex = gr.Radio(
                                    ["any", "F", "M", "O"],
                                    value="any",
                                    label="Sex",
                                    elem_id="f-sex",
                                )
                                age_min = gr.Number(
                                    AGE_ANY[0],
                                    label="Age from",
                                    minimum=AGE_ANY[0],
                                    maximum=AGE_ANY[1],
                                    elem_id="f-age-min",
                                )
                                age_max = gr.Number(
                                    AGE_ANY[1],
                                    label="Age to",
                                    minimum=AGE_ANY[0],
                                    maximum=AGE_ANY[1],
                                    elem_id="f-age-max",
                                )
                            with gr.Row():
                                date_from = gr.Textbox(
                                    label="Study date from",
                                    placeholder="YYYY-MM-DD",
                                    elem_id="f-date-from",
                                )
                                date_to = gr.Textbox(
                                    label="Study date to",
                                    placeholder="YYYY-MM-DD",
                                    elem_id="f-date-to",
                                )
                                label_known = gr.Checkbox(
                                    label="Only cases labelled for the finding",
                                    elem_id="f-label-known",
                                )
                        search_btn = gr.Button("Search", variant="primary", elem_id="search")
                        with gr.Row(equal_height=False):
                            cos_title, cos_gallery, cos_table = _ranking_column("cos")
                            geo_title, geo_gallery, geo_table = _ranking_column("geo")
                        with gr.Row(elem_classes=["cx-feedback"]):
                            rel_btn = gr.Button(
                                "Mark selected relevant", size="sm", elem_id="mark-rel"
                            )
                            nonrel_btn = gr.Button(
                                "Mark selected not relevant", size="sm", elem_id="mark-nonrel"
                            )
                            clear_btn = gr.Button("Clear feedback", size="sm", elem_id="clear-fb")
                        feedback_md = gr.Markdown(
                            CaseLookup.feedback_text((), ()), elem_id="feedback"
                        )
                        with gr.Row(equal_height=False):
                            with gr.Column(scale=3):
                                explanation = gr.HTML(NO_SELECTION, elem_id="explanation")
                            with gr.Column(scale=1, min_width=220):
                                selected_info = gr.HTML(elem_id="selected-info")

            with gr.Tab("Curation", id="curation"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=1):
                        cur_finding = gr.Dropdown(
                            list(FINDINGS),
                            value=DEFAULT_FINDING,
                            label="Finding",
                            elem_id="cur-finding",
                        )
                        cur_keys = curation.set_choices(DEFAULT_FINDING)
                        cur_set = gr.Dropdown(
                            cur_keys,
                            value=cur_keys[0] if cur_keys else None,
                            label="Anchor set",
                            elem_id="cur-set",
                        )
                        cur_edit = gr.Textbox(
                            label="Edit: one sentence per line, '+ ' positive, '- ' negative",
                            lines=16,
                            max_lines=40,
                            elem_id="cur-edit",
                        )
                        cur_desc = gr.Textbox(
                            label="What changed (saved with the new version)",
                            elem_id="cur-desc",
                        )
                        with gr.Row():
                            save_btn = gr.Button(
                                "Save as new version", variant="primary", elem_id="cur-save"
                            )
                            impact_btn = gr.Button("Measure impact", elem_id="cur-impact")
                        cur_status = gr.Markdown(elem_id="cur-status")
                    with gr.Column(scale=2):
                        cur_table = gr.HTML(elem_id="cur-table")
                        impact_md = gr.Markdown(elem_id="cur-impact-report")

            with gr.Tab("Evaluation", id="evaluation"):
                with gr.Row():
                    report_pick = gr.Dropdown(
                        [], label="Report (newest first)", elem_id="report-pick", scale=3
                    )
                    reload_btn = gr.Button("Reload", size="md", scale=1, elem_id="report-reload")
                report_md = gr.Markdown(elem_id="report-md")
                report_figs = gr.Gallery(
                    label="Figures",
                    columns=2,
                    height=520,
                    object_fit="contain",
                    format="png",
                    buttons=["fullscreen"],
                )

        gr.HTML(
            "<div class='cx-notice'>Phantom world: unless an archive of real studies was "
            "ingested, images and labels are simulated. Shown per case: view, sex, age, study "
            "date, never names or patient IDs.</div>"
        )

        # ------------------------------------------------------------------ query panel
        def render(query, c, w):
            return CaseLookup.render_query(query, c, w)

        def load_case(image_id, c, w, request: gr.Request):
            try:
                query = lookup.load_case(image_id, user=_who(request))
            except ValueError as exc:
                raise _fail(exc) from None
            return (
                query,
                render(query, c, w),
                CaseLookup.query_details(query),
                (),
                (),
                None,
                NO_SELECTION,
                "",
            )

        def load_upload(path, c, w):
            try:
                query = lookup.load_upload(path)
            except ValueError as exc:
                raise _fail(exc) from None
            return (
                query,
                render(query, c, w),
                CaseLookup.query_details(query),
                (),
                (),
                None,
                NO_SELECTION,
                "",
                None,
            )

        query_outputs = [
            query_state, query_image, query_info, relevant_state, not_relevant_state,
            selected_state, explanation, selected_info,
        ]  # fmt: skip
        search_inputs = [
            query_state, finding, anchor_set, geometry, free_text, views, sex, age_min, age_max,
            date_from, date_to, label_known, relevant_state, not_relevant_state,
        ]  # fmt: skip
        search_outputs = [
            cos_title, cos_gallery, geo_title, geo_gallery, cos_table, geo_table, ids_state,
            feedback_md,
        ]  # fmt: skip

        def settings_from(fnd, key, geom, text, v, s, amin, amax, dfrom, dto, known):
            filters = parse_filters(v, s, amin, amax, dfrom, dto, known)
            return SearchSettings(
                finding=fnd, geometry=geom, anchor_set=key or None, filters=filters,
                top_k=config.top_k, text=text,
            )  # fmt: skip

        def run_search(request: gr.Request, query, *rest):
            *widgets, relevant, not_relevant = rest
            if query is None:
                return (gr.skip(),) * len(search_outputs)
            try:
                settings = settings_from(*widgets)
                cos, geo = lookup.search(query, settings, relevant, not_relevant, _who(request))
            except ValueError as exc:
                raise _fail(exc) from None
            return (
                _ranking_title("Cosine", cos.title),
                cos.items,
                _ranking_title("Anchors", geo.title),
                geo.items,
                cos.table_html,
                geo.table_html,
                (cos.image_ids, geo.image_ids),
                CaseLookup.feedback_text(relevant, not_relevant),
            )

        case_pick.input(load_case, [case_pick, center, width], query_outputs, **private).success(
            run_search, search_inputs, search_outputs, **private
        )
        for trigger in (load_btn.click, case_id.submit):
            trigger(load_case, [case_id, center, width], query_outputs, **private).success(
                run_search, search_inputs, search_outputs, **private
            )
        upload.upload(
            load_upload, [upload, center, width], [*query_outputs, upload], **private
        ).success(run_search, search_inputs, search_outputs, **private)
        for slider in (center, width):
            slider.release(render, [query_state, center, width], query_image, **private)

        def finding_changed(fnd):
            try:
                keys, default = lookup.anchor_set_choices(fnd)
            except ValueError as exc:
                raise _fail(exc) from None
            return gr.update(choices=keys, value=default)

        finding.input(finding_changed, finding, anchor_set, **private).success(
            run_search, search_inputs, search_outputs, **private
        )
        for widget in (anchor_set, geometry):
            widget.input(run_search, search_inputs, search_outputs, **private)
        for trigger in (search_btn.click, free_text.submit):
            trigger(run_search, search_inputs, search_outputs, **private)

        # ------------------------------------------------------ selection and explanation
        def select_result(which: int):
            def handler(query, ids, fnd, key, geom, text, evt: gr.SelectData, request: gr.Request):
                image_id = ids[which][evt.index]
                settings = SearchSettings(finding=fnd, geometry=geom, anchor_set=key, text=text)
                try:
                    markdown = lookup.explain(query, settings, image_id)
                    details = lookup.result_details(image_id, user=_who(request))
                except ValueError as exc:
                    raise _fail(exc) from None
                return image_id, markdown, details

            return handler

        select_inputs = [query_state, ids_state, finding, anchor_set, geometry, free_text]
        select_outputs = [selected_state, explanation, selected_info]
        cos_gallery.select(select_result(0), select_inputs, select_outputs, **private)
        geo_gallery.select(select_result(1), select_inputs, select_outputs, **private)

        # --------------------------------------------------------------- relevance feedback
        def mark(relevant_flag: bool):
            def handler(selected, relevant, not_relevant):
                if selected is None:
                    raise gr.Error("Select a result first, then mark it.", print_exception=False)
                rel = set(relevant) - {selected}
                non = set(not_relevant) - {selected}
                (rel if relevant_flag else non).add(int(selected))
                return tuple(sorted(rel)), tuple(sorted(non))

            return handler

        feedback_states = [relevant_state, not_relevant_state]
        for button, flag in ((rel_btn, True), (nonrel_btn, False)):
            button.click(
                mark(flag), [selected_state, *feedback_states], feedback_states, **private
            ).success(run_search, search_inputs, search_outputs, **private)
        clear_btn.click(lambda: ((), ()), None, feedback_states, **private).then(
            run_search, search_inputs, search_outputs, **private
        )

        # ----------------------------------------------------------------------- curation
        @_user_errors
        def show_set(key):
            if not key:
                return "", "", ""
            anchor_set_obj = curation.get(key)
            return sentences_html(anchor_set_obj), set_as_text(anchor_set_obj), ""

        @_user_errors
        def cur_finding_changed(fnd):
            keys = curation.set_choices(fnd)
            return gr.update(choices=keys, value=keys[0] if keys else None)

        @_user_errors
        def save_version(key, text, description, search_finding):
            saved = curation.save_edit(key, text, description)
            status = (
                f"Saved **{esc(saved.key)}** as `{esc(saved.path.name)}` · {esc(saved.summary)}"
            )
            if saved.warnings:
                status += "\n\nWarnings: " + "; ".join(esc(w) for w in saved.warnings)
            new_set = curation.get(saved.key)
            keys = curation.set_choices(new_set.finding)
            search_update = gr.skip()
            if new_set.finding == search_finding:
                search_keys, _ = lookup.anchor_set_choices(search_finding)
                search_update = gr.update(choices=search_keys)
            return (gr.update(choices=keys, value=saved.key), status,
                    sentences_html(new_set), search_update)  # fmt: skip

        @_user_errors
        def impact(key):
            before = curation.previous_key(key)
            if before is None:
                raise ValueError(f"{key} is a first version; select an edited version to compare")
            return curation.impact_markdown(before, key)

        cur_set.change(show_set, cur_set, [cur_table, cur_edit, impact_md], **private)
        cur_finding.input(cur_finding_changed, cur_finding, cur_set, **private)
        save_btn.click(
            save_version,
            [cur_set, cur_edit, cur_desc, finding],
            [cur_set, cur_status, cur_table, anchor_set],
            **private,
        )
        impact_btn.click(impact, cur_set, impact_md, **private)

        # --------------------------------------------------------------------- evaluation
        @_user_errors
        def show_report(name=None):
            choices = report_choices(lookup.reports_dir)
            view = load_report(lookup.reports_dir, name or None)
            if view is None:
                empty = gr.update(value=[], visible=False)
                return (gr.update(choices=[], value=None),
                        no_report_markdown(lookup.reports_dir), empty)  # fmt: skip
            figures = gr.update(value=view.figures, visible=bool(view.figures))
            return gr.update(choices=choices, value=view.name), view.markdown, figures

        report_outputs = [report_pick, report_md, report_figs]
        report_pick.input(show_report, report_pick, report_outputs, **private)
        reload_btn.click(lambda: show_report(None), None, report_outputs, **private)
        app.load(lambda: show_report(None), None, report_outputs, **private)
        app.load(show_set, cur_set, [cur_table, cur_edit, impact_md], **private)
    return app


def open_case_lookup(config: UIConfig) -> tuple[CaseLookup, CurationDesk]:
    """Open the store and encoder named by ``config`` and build the handlers (searches and
    studies viewed are recorded in the audit trail, see chexretrieve.audit)."""
    from chexretrieve.audit import open_audit_log
    from chexretrieve.ingest.commands import load_any_encoder
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.service import SearchService
    from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
    from chexretrieve.store import open_store

    store = open_store(config.db_url)
    encoder = load_any_encoder(config.encoder)
    if store.encoder(encoder.encoder_id) is None:
        known = ", ".join(e.encoder_id for e in store.encoders()) or "none"
        raise ValueError(
            f"the archive holds no embeddings of encoder {encoder.encoder_id!r} (stored: {known}); "
            "ingest with that encoder first or pass --encoder"
        )
    audit = open_audit_log()
    service = SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        StoreAnchorProvider(store, encoder, config.anchors_dir),
        encoder=encoder,
        config=SearchConfig(
            feature_cache_dir=config.feature_cache_dir, index_kind=config.index_kind
        ),
        audit=audit,
    )
    lookup = CaseLookup(
        service,
        store,
        anchors_dir=config.anchors_dir,
        reports_dir=config.reports_dir,
        thumbnail_px=config.thumbnail_px,
        case_list_limit=config.case_list_limit,
        thumbnail_dir=config.feature_cache_dir / "thumbnails" if config.feature_cache_dir else None,
        audit=audit,
    )
    curation = CurationDesk(config.anchors_dir, store, encoder, lambda: service.gallery)
    return lookup, curation


def launch_app(app: gr.Blocks, config: UIConfig, block: bool = True):
    """Launch with the safe settings: no share link, upload cap, no extra file paths, no
    FastAPI schema, uploads never served back, a bounded event queue (busy answer beyond it)."""
    from starlette.middleware import Middleware

    from chexretrieve.ui.web_guard import UploadsStayPrivate

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    app.queue(max_size=config.queue_size)
    return app.launch(
        app_kwargs={
            "openapi_url": None,  # FastAPI's /openapi.json is served without the login
            "middleware": [Middleware(UploadsStayPrivate, blocks=app)],
        },
        server_name=config.host,
        server_port=config.port,
        share=False,
        auth=config.auth,
        auth_message="chexretrieve case lookup: sign in",
        max_file_size=f"{config.max_upload_mb}mb",
        allowed_paths=None,
        prevent_thread_lock=not block,
        show_error=False,
        quiet=not block,
        ssr_mode=False,
        mcp_server=False,
        pwa=False,
        enable_monitoring=False,
        footer_links=[],
        theme=local_theme(),
        css=CSS,
    )


def serve_app(config: UIConfig) -> None:
    """Open the archive and serve the UI until interrupted (blocks)."""
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    launch_app(app, config, block=True)
