"""The "Evaluation" tab: the newest evaluation report (or a chosen one) with its figures."""

from __future__ import annotations

import gradio as gr

from chexretrieve.ui.events import PRIVATE, user_errors
from chexretrieve.ui.handlers import CaseLookup
from chexretrieve.ui.reports import load_report, no_report_markdown, report_choices


def build_evaluation_tab(app: gr.Blocks, lookup: CaseLookup) -> None:
    """Lay out the tab and wire its events (the newest report is shown on page load)."""
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

        @user_errors
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
        report_pick.input(show_report, report_pick, report_outputs, **PRIVATE)
        reload_btn.click(lambda: show_report(None), None, report_outputs, **PRIVATE)
        app.load(lambda: show_report(None), None, report_outputs, **PRIVATE)
