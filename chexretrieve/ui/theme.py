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
