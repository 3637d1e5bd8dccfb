"""The compare viewer's panel: a full-window layer over the case lookup with the query and one
result side by side, its toolbar (window presets on each image's own values, zoom), a centre /
width per image, the two images' labels and reports and the explanation. The window events (a
preset, a window typed or dragged on one image), the full-resolution render on zoom and closing
are wired here; opening it and its feedback buttons by the lookup tab."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from chexretrieve.ui.compare import CompareViewer
from chexretrieve.ui.events import PRIVATE, attempt
from chexretrieve.ui.page_scripts import VIEWER_JS
from chexretrieve.ui.render import message_html
from chexretrieve.ui.viewer import DEFAULT_PRESET, parse_window, updated_windows


@dataclass(frozen=True)
class ViewerPanel:
    """The viewer's widgets and states the lookup tab reads or updates."""

    column: gr.Column
    # whether the viewer is open (the column is visible)
    is_open: gr.State
    # windows typed or dragged on one image ({"query"|"result": (centre, width), "result_id"});
    # None = each image under the preset over its own values (or its own default)
    window: gr.State
    # the preset shown pressed (None after a typed or dragged window)
    preset: gr.State
    title: gr.HTML
    message: gr.HTML
    images: gr.HTML
    details: gr.HTML
    relevant: gr.Button
    not_relevant: gr.Button
    close: gr.Button


def build_viewer_panel() -> ViewerPanel:
    """Lay out the viewer (hidden until a result is opened); call inside the lookup tab."""
    is_open = gr.State(False)
    window = gr.State(None)
    preset = gr.State(DEFAULT_PRESET)
    with gr.Column(visible=False, elem_id="viewer", elem_classes=["cx-viewer-layer"]) as column:
        with gr.Row(equal_height=True, elem_classes=["cx-viewer-head"]):
            title = gr.HTML(elem_id="viewer-title")
            relevant = gr.Button(
                "Relevant ✓", size="sm", elem_id="viewer-mark-rel", scale=0, min_width=120
            )
            not_relevant = gr.Button(
                "Not relevant ✗", size="sm", elem_id="viewer-mark-nonrel", scale=0, min_width=130
            )
            close = gr.Button(
                "Close (Esc)", size="sm", elem_id="viewer-close", scale=0, min_width=110
            )
        message = gr.HTML(elem_id="viewer-message")
        images = gr.HTML(js_on_load=VIEWER_JS, elem_id="viewer-images")
        details = gr.HTML(elem_id="viewer-details")
    return ViewerPanel(
        column, is_open, window, preset, title, message, images, details, relevant,
        not_relevant, close,
    )  # fmt: skip


def wire_viewer_panel(panel: ViewerPanel, viewer: CompareViewer, query_state, selected_state,
                      ids_state) -> None:  # fmt: skip
    """A preset, a typed or a dragged window (the same window on both images), and closing."""

    def rerender(query, selected, ids, windows, preset, full):
        ids = tuple(ids or ())
        rank = ids.index(selected) + 1 if selected in ids else None
        return viewer.render(query, selected, windows, rank, preset, bool(full))

    def failed(text):
        return message_html(text), gr.skip(), gr.skip(), gr.skip()

    def chose_preset(query, selected, ids, evt: gr.EventData):
        data = evt._data or {}

        def act():
            name = str(data.get("name"))
            # a preset applies to both images, each on its own values: typed windows are cleared
            html = rerender(query, selected, ids, None, name, data.get("full"))
            return "", None, name, html

        return attempt(act, failed)

    def set_window(query, selected, ids, windows, preset, evt: gr.EventData):
        data = evt._data or {}

        def act():
            window = parse_window(data.get("center"), data.get("width"))
            state = updated_windows(windows, str(data.get("side", "")), window, selected)
            html = rerender(query, selected, ids, state, preset, data.get("full"))
            return "", state, preset, html

        return attempt(act, failed)

    def full_resolution(query, selected, ids, windows, preset, evt: gr.EventData):
        full = bool((evt._data or {}).get("full"))
        return attempt(
            lambda: (
                "",
                gr.skip(),
                gr.skip(),
                rerender(query, selected, ids, windows, preset, full),
            ),
            failed,
        )

    outputs = [panel.message, panel.window, panel.preset, panel.images]
    context = [query_state, selected_state, ids_state]
    on_images = {**PRIVATE, "show_progress_on": [panel.images]}
    panel.images.preset(chose_preset, context, outputs, **on_images)
    windowed = [*context, panel.window, panel.preset]
    panel.images.window(set_window, windowed, outputs, **on_images)
    panel.images.resolution(full_resolution, windowed, outputs, **PRIVATE, show_progress="hidden")
    panel.close.click(
        lambda: (gr.update(visible=False), False, ""),
        None,
        [panel.column, panel.is_open, panel.message],
        **PRIVATE,
        show_progress="hidden",
    )
