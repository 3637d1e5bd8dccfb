"""The "Case lookup" tab: the query panel (case picker, case id, upload), the search settings, one
ranking, relevance feedback, the explanation of a selected result and the compare viewer.

Every handler answers a failure with a message above the results (``#lookup-message``) and leaves
the widgets as they were: no Gradio error badge ever replaces a widget. A new query clears the old
results, the selection, the feedback and the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from chexretrieve.findings import FINDINGS
from chexretrieve.geometry import GEOMETRIES, geometry_name
from chexretrieve.search.foreground import FOREGROUND
from chexretrieve.ui.case_picker import PICKER_CHOICES, PICKER_LABELS
from chexretrieve.ui.compare import CompareViewer
from chexretrieve.ui.config import UIConfig
from chexretrieve.ui.events import PRIVATE, attempt, is_skip, who
from chexretrieve.ui.handlers import AGE_ANY, CaseLookup, SearchSettings, parse_filters
from chexretrieve.ui.input_limits import MAX_CASE_ID, MAX_DATE_TEXT, MAX_FREE_TEXT, MAX_PICKER_TEXT
from chexretrieve.ui.page_scripts import RESULTS_JS
from chexretrieve.ui.render import message_html
from chexretrieve.ui.upload_guard import refused_upload_message, upload_guard_js
from chexretrieve.ui.url_state import PAGE_JS, restore, search_url, settings_from_url, with_url
from chexretrieve.ui.viewer import DEFAULT_PRESET
from chexretrieve.ui.viewer_panel import build_viewer_panel, wire_viewer_panel

DEFAULT_FINDING = "Pleural Effusion"
NO_SELECTION = (
    "<p class='cx-note'>Click a result to compare it with the query side by side and to see "
    "which anchor sentences make it close.</p>"
)
NO_RESULTS = (
    "<div class='cx-results'><p class='cx-empty'>No results yet: open an archived case or upload "
    "an image; its most similar prior cases appear here.</p></div>"
)
#: what the upload accepts: any file (DICOM files often have no extension); the server reads its
#: content and refuses, in the message area, what is not a DICOM, PNG or JPEG image
UPLOAD_TYPES = None
#: said after a failed search or upload when the results of the previous one stay on screen
KEPT_RESULTS = " The results below are those of the previous search."
COSINE_NOTE = "Cosine ignores the finding and the anchors (the finding's labels are still shown)."
GEOMETRY_OPTIONS = [(g.display if g.needs_anchors else "Cosine (no anchors)", g.name)
                    for g in GEOMETRIES]  # fmt: skip


@dataclass(frozen=True)
class LookupTab:
    """The lookup tab's widgets other tabs act on."""

    # the search's finding dropdown
    finding: gr.Dropdown
    # the search's anchor-set version dropdown
    anchor_set: gr.Dropdown


def build_lookup_tab(app: gr.Blocks, lookup: CaseLookup, config: UIConfig) -> LookupTab:
    """Lay out the tab and wire its events (call inside ``gr.Blocks``)."""
    viewer = CompareViewer(lookup, config.viewer_px)
    # only its count and summary go into the page; each user's listing comes at page load
    first_page = lookup.case_page(finding=DEFAULT_FINDING, record=False)
    with gr.Tab("Case lookup", id="lookup"):
        query_state = gr.State(None)
        ids_state = gr.State(())  # image ids of the ranking on screen, best first
        selected_state = gr.State(None)  # image id of the selected result
        relevant_state = gr.State(())
        not_relevant_state = gr.State(())
        page_state = gr.State(0)  # page of the case picker
        upload_ok = gr.State(False)  # whether the last upload became the query
        marked = gr.State(False)  # whether the last relevance mark applied (a result selected)
        with gr.Row(equal_height=False, elem_classes=["cx-lookup"]):
            with gr.Column(scale=1, min_width=300, elem_classes=["cx-query-panel"]):
                with gr.Row(equal_height=True):
                    case_id = gr.Textbox(
                        label="Case id or accession",
                        placeholder="e.g. 12",
                        max_length=MAX_CASE_ID,
                        elem_id="case-id",
                        scale=3,
                        min_width=150,
                    )
                    load_btn = gr.Button(
                        "Open", size="md", scale=1, min_width=70, elem_id="load-case"
                    )
                with gr.Accordion(
                    f"Browse the archive ({first_page.total:,} cases)", open=False,
                    elem_id="browse",
                ):  # fmt: skip
                    with gr.Row(equal_height=True):
                        pick_text = gr.Textbox(
                            label="Exact id or accession",
                            max_length=MAX_PICKER_TEXT,
                            elem_id="pick-text",
                            scale=2,
                            min_width=120,
                        )
                        pick_status = gr.Dropdown(
                            [(PICKER_LABELS.get(s, s), s) for s in PICKER_CHOICES],
                            value="any",
                            label="Label of the finding",
                            elem_id="pick-status",
                            scale=2,
                            min_width=120,
                        )
                    case_pick = gr.Dropdown(  # filled per user at page load (audited)
                        choices=[],
                        value=None,
                        label="Cases",
                        info=first_page.summary,
                        elem_id="case-pick",
                    )
                    with gr.Row():
                        prev_btn = gr.Button("◀ Previous", size="sm", elem_id="pick-prev")
                        next_btn = gr.Button("Next ▶", size="sm", elem_id="pick-next")
                upload = gr.File(
                    label="Or upload a DICOM / PNG / JPEG",
                    file_types=UPLOAD_TYPES,
                    type="filepath",
                    height=120,
                    elem_id="upload",
                )
                # the preview is in-page data (like the thumbnails), never a served file
                query_image = gr.HTML(CaseLookup.query_preview_html(None), elem_id="query-image")
                open_query_btn = gr.Button(  # enabled once there is a query (new_query)
                    "Open the query in the compare viewer", size="sm", elem_id="open-query",
                    interactive=False,
                )  # fmt: skip
                query_info = gr.HTML(CaseLookup.query_details(None), elem_id="query-info")
            with gr.Column(scale=3, min_width=600):
                message = gr.HTML(
                    elem_id="lookup-message",
                    js_on_load=upload_guard_js("upload", config.max_upload_mb) + PAGE_JS,
                )
                with gr.Row(equal_height=True):
                    finding = gr.Dropdown(
                        list(FINDINGS), value=DEFAULT_FINDING, label="Finding", elem_id="finding"
                    )
                    # filled at each page load (page_loaded): versions published since the
                    # server started are offered, and no label of the build time is shown stale
                    anchor_set = gr.Dropdown(
                        [],
                        value=None,
                        label="Anchor set version",
                        elem_id="anchor-set",
                    )
                    geometry = gr.Dropdown(
                        GEOMETRY_OPTIONS, value="softmax", label="Geometry", elem_id="geometry"
                    )
                with gr.Row(equal_height=True):
                    free_text = gr.Textbox(
                        label="Free text (optional)",
                        placeholder="e.g. small left effusion",
                        max_length=MAX_FREE_TEXT,
                        elem_id="free-text",
                    )
                    baseline = gr.Checkbox(
                        label="Cosine baseline column", elem_id="baseline", scale=0, min_width=220
                    )
                    search_btn = gr.Button(
                        "Search", variant="primary", elem_id="search", scale=0, min_width=140
                    )
                with gr.Accordion("Filters", open=False, elem_id="filters"):
                    with gr.Row():
                        views = gr.CheckboxGroup(
                            lookup.view_choices(), label="View", elem_id="f-views"
                        )
                        sex = gr.Radio(
                            ["any", "F", "M", "O"], value="any", label="Sex", elem_id="f-sex"
                        )
                        # no minimum/maximum here: parse_filters checks the range (and NaN,
                        # infinity, text) itself and says so above the results
                        age_min = gr.Number(AGE_ANY[0], label="Age from", elem_id="f-age-min")
                        age_max = gr.Number(AGE_ANY[1], label="Age to", elem_id="f-age-max")
                    with gr.Row():
                        date_from = gr.Textbox(
                            label="Study date from", placeholder="YYYY-MM-DD",
                            elem_id="f-date-from", max_length=MAX_DATE_TEXT,
                        )  # fmt: skip
                        date_to = gr.Textbox(
                            label="Study date to", placeholder="YYYY-MM-DD",
                            elem_id="f-date-to", max_length=MAX_DATE_TEXT,
                        )  # fmt: skip
                        label_known = gr.Checkbox(
                            label="Only cases labelled for the finding",
                            elem_id="f-label-known",
                        )
                results = gr.HTML(NO_RESULTS, js_on_load=RESULTS_JS, elem_id="results")
                with gr.Row(elem_classes=["cx-feedback"]):
                    rel_btn = gr.Button("Mark selected relevant", size="sm", elem_id="mark-rel")
                    nonrel_btn = gr.Button(
                        "Mark selected not relevant", size="sm", elem_id="mark-nonrel"
                    )
                    clear_btn = gr.Button("Clear feedback", size="sm", elem_id="clear-fb")
                feedback_md = gr.Markdown(CaseLookup.feedback_text((), ()), elem_id="feedback")
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3, min_width=360):
                        explanation = gr.HTML(NO_SELECTION, elem_id="explanation")
                    with gr.Column(scale=2, min_width=240):
                        selected_info = gr.HTML(elem_id="selected-info")
        panel = build_viewer_panel()
    wire_viewer_panel(panel, viewer, query_state, selected_state, ids_state)
    # where Gradio shows that an action runs: the search's own steps over the results, a
    # spinner over the query for a load, nothing for quick updates (no time estimate anywhere)
    on_results = {**PRIVATE, "show_progress_on": [results]}
    on_query = {**PRIVATE, "show_progress_on": [query_image]}
    quietly = {**PRIVATE, "show_progress": "hidden"}

    settings_inputs = [finding, anchor_set, geometry, free_text, views, sex, age_min, age_max,
                       date_from, date_to, label_known]  # fmt: skip

    def settings_from(data: dict) -> SearchSettings:
        """The search settings from the widgets' values (handlers get a {component: value})."""
        filters = parse_filters(
            data[views], data[sex], data[age_min], data[age_max], data[date_from],
            data[date_to], data[label_known],
        )  # fmt: skip
        return SearchSettings(
            finding=data[finding], geometry=data[geometry], anchor_set=data[anchor_set] or None,
            filters=filters, top_k=config.top_k, text=data[free_text],
        )  # fmt: skip

    # ------------------------------------------------------------------ query panel
    query_outputs = [
        message, query_state, query_image, query_info, results, ids_state, selected_state,
        relevant_state, not_relevant_state, feedback_md, explanation, selected_info,
        panel.window, panel.preset, panel.column, panel.is_open, open_query_btn,
    ]  # fmt: skip

    def new_query(query, note: str = "", fnd: str | None = None):
        """Outputs for a new query (None after a failure): everything of the old one cleared."""
        info = message_html(note) if query is None else ""
        return (
            info, query, CaseLookup.query_preview_html(query), CaseLookup.query_details(query, fnd),
            NO_RESULTS, (), None, (), (), CaseLookup.feedback_text((), ()), NO_SELECTION, "",
            None, DEFAULT_PRESET, gr.update(visible=False), False,
            gr.update(interactive=query is not None),
        )  # fmt: skip

    def load_case(value, fnd, request: gr.Request):
        return attempt(
            lambda: new_query(lookup.load_case(value, user=who(request)), fnd=fnd),
            lambda t: new_query(None, t),
        )

    def load_upload(path, fnd, ids):
        """A refused upload is a message; the previous query and its results stay (no search
        follows: the last output says whether one should)."""

        def act():
            query = lookup.load_upload(path, viewer_px=None)  # full size: zoom shows it 1:1
            return (*new_query(query, fnd=fnd), None, True)

        def refused(text):
            kept = KEPT_RESULTS if ids else ""
            return (message_html(text + kept), *(gr.skip(),) * (len(query_outputs) - 1), None,
                    False)  # fmt: skip

        return attempt(act, refused)

    def upload_refused_in_browser(evt: gr.EventData, ids):
        text = refused_upload_message(evt._data, config.max_upload_mb)
        return message_html(text + (KEPT_RESULTS if ids else ""))

    message.pick(upload_refused_in_browser, ids_state, message, **PRIVATE)

    search_inputs = {query_state, *settings_inputs, baseline, relevant_state, not_relevant_state,
                     selected_state, panel.is_open, panel.window, panel.preset,
                     ids_state}  # fmt: skip
    search_outputs = [
        message, results, ids_state, selected_state, feedback_md, explanation, selected_info,
        panel.column, panel.is_open, panel.title, panel.images, panel.details,
    ]  # fmt: skip

    def search(explicit: bool):
        def run_search(data: dict, request: gr.Request, progress=gr.Progress()):
            with FOREGROUND.searching():  # the index's background check waits meanwhile
                return search_page(data, request, progress)

        def search_page(data: dict, request: gr.Request, progress):
            query, selected, window = data[query_state], data[selected_state], data[panel.window]
            relevant, not_relevant = data[relevant_state], data[not_relevant_state]
            if query is None:
                if not explicit:
                    return (gr.skip(),) * len(search_outputs)
                text = (
                    "No query yet: open an archived case (id, accession or the list) or upload "
                    "an image, then search."
                )
                return (message_html(text), *(gr.skip(),) * (len(search_outputs) - 1))

            def act():
                settings = settings_from(data)
                page = lookup.search(
                    query, settings, relevant, not_relevant, who(request), selected,
                    bool(data[baseline]), lambda f, what: progress(f, desc=what),
                )  # fmt: skip
                ids = page.image_ids
                feedback = CaseLookup.feedback_text(relevant, not_relevant)
                latest = lookup.anchor_set_choices(settings.finding)[1]
                html = with_url(page.html, search_url(query, settings, latest))  # the address
                if selected is None:  # nothing selected: a viewer of the query alone stays
                    return ("", html, ids, None, feedback, NO_SELECTION, "",
                            *(gr.skip(),) * 5)  # fmt: skip
                if selected not in ids:
                    gone = ""
                    if selected is not None:
                        gone = (
                            f"Case {selected} is no longer in the top {len(ids)}; its selection "
                            "was cleared."
                        )
                    return (message_html(gone, "info"), html, ids, None, feedback,
                            NO_SELECTION, "", gr.update(visible=False), False, gr.skip(),
                            gr.skip(), gr.skip())  # fmt: skip
                explained = lookup.explain(query, settings, selected)
                viewer_outputs = (gr.skip(),) * 3
                if data[panel.is_open]:
                    shown = viewer.open(
                        query, selected, settings, window, ids.index(selected) + 1,
                        record=False, preset=data[panel.preset],
                    )  # fmt: skip
                    viewer_outputs = (shown.title_html, shown.images_html, shown.details_html)
                return ("", html, ids, selected, feedback, explained, gr.skip(),
                        gr.skip(), gr.skip(), *viewer_outputs)  # fmt: skip

            def failed(text):
                # the previous results, selection and viewer stay; the message says so
                kept = KEPT_RESULTS if data[ids_state] else ""
                return (message_html(text + kept), *(gr.skip(),) * (len(search_outputs) - 1))

            return attempt(act, failed)

        return run_search

    quiet_search, explicit_search = search(False), search(True)

    def search_when(flag: gr.State):
        """The quiet search after a step that sets ``flag``: nothing when the step did not
        apply (a failed upload, a mark with nothing selected): it would clear their message."""

        def search_if_flagged(data: dict, request: gr.Request, progress=gr.Progress()):
            if not data[flag]:
                return (gr.skip(),) * len(search_outputs)
            return quiet_search(data, request, progress)

        return search_if_flagged

    def pick_case(value, fnd, request: gr.Request):
        """A case chosen in the list; the list closed without a choice changes nothing."""
        if value is None or value == "":
            return (gr.skip(),) * len(query_outputs)
        return load_case(value, fnd, request)

    # opening a case and searching it are one event: one round trip and one page update (as
    # two chained events they cost a second round trip and a second update per opened case)
    open_outputs = [*query_outputs, *(c for c in search_outputs if c not in query_outputs)]
    on_open = {**PRIVATE, "show_progress_on": [query_image, results]}

    def opening(loader, widget):
        """An event handler: ``loader`` (the query outputs), then the search of the new query
        on the page's settings; the search's outputs win where it sets one."""

        def open_and_search(data: dict, request: gr.Request, progress=gr.Progress()):
            with FOREGROUND.searching():  # the index's background check waits meanwhile
                return open_then_search(data, request, progress)

        def open_then_search(data: dict, request: gr.Request, progress):
            loaded = dict(zip(query_outputs, loader(data[widget], data[finding], request),
                              strict=True))  # fmt: skip
            if all(is_skip(value) for value in loaded.values()):  # nothing opened
                return (gr.skip(),) * len(open_outputs)
            # the search sees the new query and what opening it cleared (feedback, selection)
            fresh = {c: v for c, v in loaded.items() if c in data and not is_skip(v)}
            searched = quiet_search({**data, **fresh}, request, progress)
            shown = dict(loaded)
            for component, value in zip(search_outputs, searched, strict=True):
                if component not in shown or not is_skip(value):
                    shown[component] = value
            return tuple(shown[c] for c in open_outputs)

        return open_and_search

    for handler, widget, triggers in (
        (load_case, case_id, (load_btn.click, case_id.submit)),
        (pick_case, case_pick, (case_pick.input,)),
    ):
        for trigger in triggers:
            trigger(opening(handler, widget), {widget, finding, *search_inputs}, open_outputs,
                    **on_open)  # fmt: skip

    upload.upload(
        load_upload, [upload, finding, ids_state], [*query_outputs, upload, upload_ok], **on_query
    ).then(search_when(upload_ok), {*search_inputs, upload_ok}, search_outputs, **on_results)

    # ------------------------------------------------------------------ case picker
    picker_outputs = [case_pick, page_state, message]

    def show_page(text, status, fnd, page, request: gr.Request | None = None):
        def act():
            found = lookup.case_page(text, fnd, status, page, user=who(request))
            return gr.update(choices=found.choices, value=None, info=found.summary), found.page, ""

        return attempt(act, lambda t: (gr.skip(), gr.skip(), message_html(t)))

    picker_inputs = [pick_text, pick_status, finding]

    def first_page_of(text, status, fnd, request: gr.Request):
        return show_page(text, status, fnd, 0, request)

    def previous_page(text, status, fnd, page, request: gr.Request):
        return show_page(text, status, fnd, page - 1, request)

    def next_page(text, status, fnd, page, request: gr.Request):
        return show_page(text, status, fnd, page + 1, request)

    for trigger in (pick_text.submit, pick_status.input):
        trigger(first_page_of, picker_inputs, picker_outputs, **quietly)
    prev_btn.click(previous_page, [*picker_inputs, page_state], picker_outputs, **quietly)
    next_btn.click(next_page, [*picker_inputs, page_state], picker_outputs, **quietly)

    # ------------------------------------------------------------------ search settings
    def finding_changed(fnd, text, status, request: gr.Request):
        def act():
            choices, default = lookup.anchor_set_choices(fnd)
            found = lookup.case_page(text, fnd, status, 0, user=who(request))
            listed = gr.update(choices=found.choices, value=None, info=found.summary)
            return gr.update(choices=choices, value=default), "", listed, 0

        return attempt(act, lambda t: (gr.skip(), message_html(t), gr.skip(), gr.skip()))

    finding.input(
        finding_changed,
        [finding, pick_text, pick_status],
        [anchor_set, message, case_pick, page_state],
        **quietly,
    ).then(quiet_search, search_inputs, search_outputs, **on_results)

    def geometry_changed(geom):
        uses_anchors = attempt(lambda: geometry_name(geom).needs_anchors, lambda _: True)
        info = "" if uses_anchors else COSINE_NOTE  # "" clears the note; None would keep it
        return (gr.update(interactive=uses_anchors, info=info),
                gr.update(interactive=uses_anchors, info=info))  # fmt: skip

    geometry.input(geometry_changed, geometry, [finding, anchor_set], **quietly).then(
        quiet_search, search_inputs, search_outputs, **on_results
    )
    for widget in (anchor_set, baseline):
        widget.input(quiet_search, search_inputs, search_outputs, **on_results)
    for trigger in (search_btn.click, free_text.submit):
        trigger(explicit_search, search_inputs, search_outputs, **on_results)

    # ------------------------------------------------------ selection and the compare viewer
    select_inputs = {query_state, ids_state, *settings_inputs, panel.window, panel.preset}
    select_outputs = [
        message, selected_state, explanation, selected_info, panel.column, panel.is_open,
        panel.title, panel.images, panel.details, panel.message, panel.relevant,
        panel.not_relevant,
    ]  # fmt: skip
    # the feedback buttons only where there is a result to mark (not in the query's own viewer)
    marks_shown = (gr.update(visible=True), gr.update(visible=True))

    def select_result(data: dict, evt: gr.EventData, request: gr.Request):
        query, ids, window = data[query_state], tuple(data[ids_state] or ()), data[panel.window]
        picked = (evt._data or {}).get("case_id")

        def act():
            image_id = int(picked)
            if image_id not in ids:
                raise ValueError(
                    f"case {image_id} is not among the results on screen; search again"
                )
            settings = settings_from(data)
            rank = ids.index(image_id) + 1
            shown = viewer.open(
                query, image_id, settings, window, rank, who(request), preset=data[panel.preset]
            )
            # the viewer recorded this view of the study; the side panel shows the same case
            details = lookup.result_details(image_id, finding=settings.finding, what=None)
            return ("", image_id, lookup.explain(query, settings, image_id), details,
                    gr.update(visible=True), True, shown.title_html, shown.images_html,
                    shown.details_html, "", *marks_shown)  # fmt: skip

        return attempt(act, lambda t: (message_html(t), *(gr.skip(),) * (len(select_outputs) - 1)))

    results.pick(select_result, select_inputs, select_outputs, **on_results)

    def open_query(data: dict):
        def act():
            shown = viewer.open(
                data[query_state], None, settings_from(data), data[panel.window],
                preset=data[panel.preset],
            )  # fmt: skip
            return ("", gr.update(visible=True), True, shown.title_html, shown.images_html,
                    shown.details_html, gr.update(visible=False),
                    gr.update(visible=False))  # fmt: skip

        return attempt(act, lambda t: (message_html(t), *(gr.skip(),) * 7))

    open_query_btn.click(
        open_query, {query_state, *settings_inputs, panel.window, panel.preset},
        [message, panel.column, panel.is_open, panel.title, panel.images, panel.details,
         panel.relevant, panel.not_relevant],
        **on_query,
    )  # fmt: skip

    # --------------------------------------------------------------- relevance feedback
    def mark(relevant_flag: bool):
        def handler(selected, relevant, not_relevant):
            if selected is None:  # said in the viewer too: a query-only viewer stays open
                text = "Select a result first (click its card or row), then mark it."
                return message_html(text), message_html(text), gr.skip(), gr.skip(), False
            rel = set(relevant) - {selected}
            non = set(not_relevant) - {selected}
            (rel if relevant_flag else non).add(int(selected))
            return "", "", tuple(sorted(rel)), tuple(sorted(non)), True

        return handler

    feedback_states = [relevant_state, not_relevant_state]
    for buttons, flag in (
        ((rel_btn, panel.relevant), True),
        ((nonrel_btn, panel.not_relevant), False),
    ):
        for button in buttons:
            button.click(
                mark(flag),
                [selected_state, *feedback_states],
                [message, panel.message, *feedback_states, marked],
                **quietly,
            ).then(search_when(marked), {*search_inputs, marked}, search_outputs, **on_results)
    clear_btn.click(lambda: ((), ()), None, feedback_states, **quietly).then(
        quiet_search, search_inputs, search_outputs, **on_results
    )

    # ------------------------------------------------------------------ page load
    restored_outputs = [anchor_set, message, finding, geometry, case_id, free_text, views, sex,
                        age_min, age_max, date_from, date_to, label_known,
                        case_pick]  # fmt: skip

    def page_loaded(fnd, request: gr.Request):
        """Anchor-set versions as they are now (a version saved before a reload is offered, and
        the latest is the default, as for the CLI), the settings the address names, and the
        picker's first page for this user."""
        wanted = settings_from_url(getattr(request, "query_params", None))

        def act():
            got = restore(lookup, wanted, fnd, DEFAULT_FINDING)
            info = "" if got.uses_anchors else COSINE_NOTE
            usable = {"interactive": got.uses_anchors, "info": info}
            w = got.wanted

            def value(v):
                return gr.skip() if v is None else gr.update(value=v)

            found = lookup.case_page(None, got.finding, None, 0, user=who(request))
            listed = gr.update(choices=found.choices, value=None, info=found.summary)

            return (
                gr.update(choices=got.anchor_choices, value=got.anchor_set, **usable), "",
                gr.update(value=got.finding, **usable), value(got.geometry), value(w.case),
                value(w.text), value(None if w.views is None else list(w.views)), value(w.sex),
                value(w.age_min), value(w.age_max), value(w.date_from), value(w.date_to),
                value(w.label_known), listed,
            )  # fmt: skip

        def failed(text):
            return (gr.skip(), message_html(text), *(gr.skip(),) * (len(restored_outputs) - 2))

        return attempt(act, failed)

    def load_linked_case(value, fnd, request: gr.Request):
        """The case the address names, as if typed (nothing without one)."""
        if settings_from_url(getattr(request, "query_params", None)).case is None:
            return (gr.skip(),) * len(query_outputs)
        return load_case(value, fnd, request)

    app.load(page_loaded, finding, restored_outputs, **quietly).then(
        opening(load_linked_case, case_id), {case_id, finding, *search_inputs}, open_outputs,
        **on_open,
    )  # fmt: skip
    return LookupTab(finding=finding, anchor_set=anchor_set)
