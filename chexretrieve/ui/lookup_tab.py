"""The "Case lookup" tab: query panel (archived case or upload), search settings, the two
rankings, relevance feedback and the explanation of a selected result."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from chexretrieve.findings import FINDINGS
from chexretrieve.search.features import GEOMETRY_CHOICES
from chexretrieve.ui.config import UIConfig
from chexretrieve.ui.events import PRIVATE, fail, who
from chexretrieve.ui.handlers import AGE_ANY, CaseLookup, SearchSettings, parse_filters
from chexretrieve.ui.render import esc

DEFAULT_FINDING = "Pleural Effusion"
NO_SELECTION = (
    "<p class='cx-note'>Select a result in either ranking to see which anchor sentences make it "
    "close to the query.</p>"
)
UPLOAD_TYPES = [".dcm", ".dicom", ".dic", ".png", ".jpg", ".jpeg"]


def _ranking_title(kind: str, title: str) -> str:
    return f"<div class='cx-ranking-title'><b>{esc(kind)}</b> · {esc(title)}</div>"


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


@dataclass(frozen=True)
class LookupTab:
    """The lookup tab's widgets other tabs act on."""

    # the search's finding dropdown
    finding: gr.Dropdown
    # the search's anchor-set version dropdown
    anchor_set: gr.Dropdown


def build_lookup_tab(lookup: CaseLookup, config: UIConfig) -> LookupTab:
    """Lay out the tab and wire its events (call inside ``gr.Blocks``)."""
    anchor_keys, anchor_default = lookup.anchor_set_choices(DEFAULT_FINDING)
    with gr.Tab("Case lookup", id="lookup"):
        query_state = gr.State(None)
        ids_state = gr.State(((), ()))  # image ids shown in (cosine, anchor) galleries
        selected_state = gr.State(None)  # image id of the selected result
        relevant_state = gr.State(())
        not_relevant_state = gr.State(())
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
                    rel_btn = gr.Button("Mark selected relevant", size="sm", elem_id="mark-rel")
                    nonrel_btn = gr.Button(
                        "Mark selected not relevant", size="sm", elem_id="mark-nonrel"
                    )
                    clear_btn = gr.Button("Clear feedback", size="sm", elem_id="clear-fb")
                feedback_md = gr.Markdown(CaseLookup.feedback_text((), ()), elem_id="feedback")
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3):
                        explanation = gr.HTML(NO_SELECTION, elem_id="explanation")
                    with gr.Column(scale=1, min_width=220):
                        selected_info = gr.HTML(elem_id="selected-info")

    # ------------------------------------------------------------------ query panel
    def render(query, c, w):
        return CaseLookup.render_query(query, c, w)

    def load_case(image_id, c, w, request: gr.Request):
        try:
            query = lookup.load_case(image_id, user=who(request))
        except ValueError as exc:
            raise fail(exc) from None
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
            raise fail(exc) from None
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
            cos, geo = lookup.search(query, settings, relevant, not_relevant, who(request))
        except ValueError as exc:
            raise fail(exc) from None
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

    case_pick.input(load_case, [case_pick, center, width], query_outputs, **PRIVATE).success(
        run_search, search_inputs, search_outputs, **PRIVATE
    )
    for trigger in (load_btn.click, case_id.submit):
        trigger(load_case, [case_id, center, width], query_outputs, **PRIVATE).success(
            run_search, search_inputs, search_outputs, **PRIVATE
        )
    upload.upload(
        load_upload, [upload, center, width], [*query_outputs, upload], **PRIVATE
    ).success(run_search, search_inputs, search_outputs, **PRIVATE)
    for slider in (center, width):
        slider.release(render, [query_state, center, width], query_image, **PRIVATE)

    def finding_changed(fnd):
        try:
            keys, default = lookup.anchor_set_choices(fnd)
        except ValueError as exc:
            raise fail(exc) from None
        return gr.update(choices=keys, value=default)

    finding.input(finding_changed, finding, anchor_set, **PRIVATE).success(
        run_search, search_inputs, search_outputs, **PRIVATE
    )
    for widget in (anchor_set, geometry):
        widget.input(run_search, search_inputs, search_outputs, **PRIVATE)
    for trigger in (search_btn.click, free_text.submit):
        trigger(run_search, search_inputs, search_outputs, **PRIVATE)

    # ------------------------------------------------------ selection and explanation
    def select_result(which: int):
        def handler(query, ids, fnd, key, geom, text, evt: gr.SelectData, request: gr.Request):
            image_id = ids[which][evt.index]
            settings = SearchSettings(finding=fnd, geometry=geom, anchor_set=key, text=text)
            try:
                markdown = lookup.explain(query, settings, image_id)
                details = lookup.result_details(image_id, user=who(request))
            except ValueError as exc:
                raise fail(exc) from None
            return image_id, markdown, details

        return handler

    select_inputs = [query_state, ids_state, finding, anchor_set, geometry, free_text]
    select_outputs = [selected_state, explanation, selected_info]
    cos_gallery.select(select_result(0), select_inputs, select_outputs, **PRIVATE)
    geo_gallery.select(select_result(1), select_inputs, select_outputs, **PRIVATE)

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
            mark(flag), [selected_state, *feedback_states], feedback_states, **PRIVATE
        ).success(run_search, search_inputs, search_outputs, **PRIVATE)
    clear_btn.click(lambda: ((), ()), None, feedback_states, **PRIVATE).then(
        run_search, search_inputs, search_outputs, **PRIVATE
    )
    return LookupTab(finding=finding, anchor_set=anchor_set)
