"""The UI's look: a calm Gradio theme with local fonts and the project's CSS."""

from __future__ import annotations

import gradio as gr

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
.cx-not-mentioned {background: #f1f3f5; color: #5f6b76; border-color: #dde2e6}
.cx-ranking-title {font-size: 0.92rem; padding: 0.1rem 0.2rem}
.cx-details-title {font-weight: 600; font-size: 0.92rem; margin-bottom: 0.3rem}
.cx-details table {border-collapse: collapse; width: 100%; font-size: 0.84rem}
.cx-details th, .cx-details td {border: none !important; padding: 0.12rem 0.3rem; text-align: left;
  background: transparent}
.cx-details th {font-weight: 500; color: var(--body-text-color-subdued); width: 42%}
.cx-explanation table.cx-hits td.cx-text {white-space: normal}
.cx-scroll {max-height: 720px; overflow-y: auto}
.cx-empty {color: var(--body-text-color-subdued); font-style: italic}
.cx-message {border-radius: 6px; padding: 0.45rem 0.75rem; font-size: 0.88rem; margin: 0 0 0.3rem}
.cx-message-error {background: #fdecea; border: 1px solid #f5b7b1; color: #8a1c12}
.cx-message-info {background: #eef4fb; border: 1px solid #c5d9ef; color: #1d4f7a}
.cx-results-title {font-size: 0.9rem; font-weight: 600; margin: 0.2rem 0 0.4rem}
.cx-cards {display: grid; grid-template-columns: repeat(6, minmax(0, 1fr));
  gap: 0.5rem; margin-bottom: 0.6rem}
.cx-card {display: flex; flex-direction: column; align-items: stretch; gap: 0.15rem;
  padding: 0.3rem; border: 2px solid var(--border-color-primary); border-radius: 6px;
  background: var(--background-fill-primary); cursor: pointer; text-align: left;
  font: inherit; color: inherit; min-width: 0}
.cx-card-cell {display: flex; flex-direction: column; gap: 0.15rem; min-width: 0}
.cx-card-cell > .cx-card {flex: 1}
a.cx-ohif {font-size: 0.78rem; color: var(--color-accent); text-decoration: underline;
  white-space: nowrap}
.cx-card img {width: 100%; aspect-ratio: 1 / 1; object-fit: contain; background: #000;
  border-radius: 3px; display: block}
.cx-card-text {font-size: 0.78rem; line-height: 1.25rem; white-space: normal;
  overflow-wrap: anywhere}
.cx-card:hover, .cx-row:hover {border-color: var(--color-accent-soft);
  background: var(--background-fill-secondary)}
.cx-card.cx-selected {border-color: #2563eb; box-shadow: 0 0 0 2px #bfd3fb}
tr.cx-row {cursor: pointer}
tr.cx-row.cx-selected td {background: #e3ecfd !important}
.cx-sim {font-variant-numeric: tabular-nums; font-weight: 600}
.cx-sim-withheld {color: #5b6572; font-weight: 400; font-style: italic}
.cx-table-wrap {overflow-x: auto; max-width: 100%}
table.cx-result-table td.cx-report {white-space: normal; min-width: 14rem; font-size: 0.78rem;
  color: var(--body-text-color-subdued)}
.cx-legend {font-size: 0.84rem; color: var(--body-text-color); margin: 0 0 0.5rem;
  line-height: 1.35}
.cx-labels {display: flex; flex-wrap: wrap; gap: 0.25rem 0.6rem; font-size: 0.8rem}
.cx-finding {white-space: nowrap}
.cx-report-text {font-size: 0.84rem; margin: 0.2rem 0; white-space: normal}
.cx-plain {font-size: 0.9rem; margin: 0.3rem 0 0.4rem}
.cx-explanation table.cx-hits, .cx-viewer-explanation table.cx-hits {table-layout: auto}
.cx-explanation td.cx-text {min-width: 12rem}
#viewer.cx-viewer-layer {position: fixed; inset: 0; z-index: 1000; margin: 0;
  background: var(--background-fill-primary); overflow-y: auto; padding: 0.6rem 1rem;
  box-sizing: border-box}
.cx-viewer-head {align-items: center}
.cx-viewer-title {font-size: 1.05rem; font-weight: 650}
.cx-viewer {display: flex; flex-direction: column; gap: 0.3rem}
.cx-tools {display: flex; align-items: center; gap: 0.4rem 1.2rem; flex-wrap: wrap;
  font-size: 0.85rem}
.cx-tool-group {display: flex; align-items: center; gap: 0.35rem; flex-wrap: wrap}
.cx-tool-label {font-weight: 600}
.cx-win-field input {width: 6.5rem; padding: 0.1rem 0.3rem; font: inherit;
  border: 1px solid var(--border-color-primary); border-radius: 4px;
  background: var(--background-fill-primary); color: inherit}
.cx-preset.cx-on {background: var(--color-accent); color: white; border-color: var(--color-accent)}
.cx-tools button {border: 1px solid var(--border-color-primary); border-radius: 4px;
  background: var(--background-fill-secondary); padding: 0.1rem 0.6rem; cursor: pointer;
  font: inherit}
.cx-zoom-level {font-variant-numeric: tabular-nums; min-width: 3.2rem}
.cx-panes {display: grid; grid-template-columns: 1fr 1fr; gap: 0.6rem}
.cx-pane {margin: 0; min-width: 0}
.cx-pane figcaption {font-size: 0.88rem; padding: 0.15rem 0; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis}
.cx-pane-window {display: flex; align-items: center; gap: 0.35rem; flex-wrap: wrap;
  font-size: 0.82rem; padding: 0 0 0.2rem}
.cx-pane-window button {border: 1px solid var(--border-color-primary); border-radius: 4px;
  background: var(--background-fill-secondary); padding: 0.05rem 0.5rem; cursor: pointer;
  font: inherit}
.cx-viewer:focus {outline: none}
.cx-pane-frame {height: calc(100vh - 17rem); min-height: 260px; overflow: auto;
  background: #000; border-radius: 4px; display: flex; align-items: safe center;
  justify-content: safe center; touch-action: none}
.cx-pane-empty .cx-pane-frame {background: var(--background-fill-secondary)}
.cx-view-img {display: block; flex: none; cursor: crosshair; user-select: none;
  width: 100%; height: 100%; object-fit: contain}
.cx-view-img.cx-zoomed {object-fit: fill}
.cx-window-readout {font-size: 0.82rem; margin: 0; font-variant-numeric: tabular-nums}
.cx-sides {display: grid; grid-template-columns: 1fr 1fr; gap: 1rem}
.cx-lookup .cx-query-panel {min-width: 300px}
.cx-account {text-align: right; font-size: 0.85rem; margin: -0.5rem 0 0}
.cx-query-preview {height: 260px; background: #000; border-radius: 4px; display: flex;
  align-items: center; justify-content: center; overflow: hidden}
.cx-query-empty {display: none}
#query-image:has(.cx-query-empty) {display: none}
.cx-query-img {display: block; max-width: 100%; max-height: 100%; object-fit: contain}
#upload {min-height: 0}
#upload [data-testid="upload-icon"] {display: none}
#upload button.upload-container {padding-top: 2.1rem; box-sizing: border-box}
#lookup-message:has(.prose:empty), #viewer-message:has(.prose:empty) {display: none}
[data-testid="status-tracker"] .eta-bar, [data-testid="status-tracker"] .progress-text
  {display: none}
"""


#: theme variables darkened for WCAG AA contrast (4.5:1): text colour by role, then fills
READABLE = {
    # field descriptions and notes, then input placeholders
    **dict.fromkeys(("body_text_color_subdued", "block_info_text_color"), "*neutral_600"),
    "input_placeholder_color": "*neutral_500",
    # the blue chips naming each field
    **dict.fromkeys(("block_title_text_color", "block_label_text_color"), "*primary_800"),
    # the primary button and a chosen radio option (white text on them), links
    **dict.fromkeys(
        (
            "button_primary_background_fill",
            "checkbox_label_background_fill_selected",
            "color_accent",
            "link_text_color",
        ),
        "*primary_700",
    ),
    **dict.fromkeys(
        (
            "button_primary_background_fill_hover",
            "link_text_color_hover",
            "link_text_color_visited",
        ),
        "*primary_800",
    ),  # fmt: skip
}


def local_theme():
    """A calm theme with local fonts only (no web-font download: the app works offline), every
    text at WCAG AA contrast or better (4.5:1; issue 34): Soft's subdued text (slate 400, about
    2.5:1 on its background), its blue field labels (blue 500 on blue 100, about 3:1) and white on
    its primary buttons (blue 500, about 3.7:1) are darkened."""
    return gr.themes.Soft(
        primary_hue="blue",
        neutral_hue="slate",
        font=("ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"),
        font_mono=("ui-monospace", "SFMono-Regular", "Menlo", "monospace"),
    ).set(**READABLE)
