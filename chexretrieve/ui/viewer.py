"""The compare viewer (no Gradio): the query and one result side by side at viewing size, under a
window in the images' own pixel values.

Window rules:
- No window chosen (``None``): each image under its own default, the first DICOM Window Center /
  Width of its file (a file with only a VOI LUT Sequence: the linear window over which the LUT
  rises; PNG / JPEG: the bit depth; without any of these: the value range).
- A preset or a drag: the same (centre, width) on both images. Radiographs have no Hounsfield
  scale, so the presets are windows over the query's own value distribution (percentiles, mirrored
  for images whose low values show white): *lung* the darker part of the image, *mediastinum* the
  soft-tissue middle, *bone* the brightest part.
Images are rendered on the server (``chexretrieve.dicom.linear_window``) and sent as ``data:`` PNGs;
zoom and the live preview while dragging happen in the browser (``chexretrieve.ui.page_scripts``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from chexretrieve.dicom.viewing import PixelValues, check_window, linear_window
from chexretrieve.ui.render import esc
from chexretrieve.ui.results_html import png_data_uri

#: window presets: (low, high) percentiles of the query's values, as shown for MONOCHROME2
WINDOW_PRESETS: dict[str, tuple[float, float]] = {
    "lung": (1.0, 60.0),
    "mediastinum": (30.0, 95.0),
    "bone": (60.0, 99.5),
}
#: the preset choice meaning "each image under its own DICOM window"
DEFAULT_PRESET = "DICOM default"
PRESET_CHOICES = (DEFAULT_PRESET, *WINDOW_PRESETS)


@dataclass(frozen=True)
class ViewerSide:
    """One pane of the viewer."""

    # heading above the image ("Query · case 5", "Result #2 · case 17")
    title: str
    # the image's values and default window
    pixels: PixelValues
    # PHI-minimal line under the heading (view, sex, age, date)
    subtitle: str = ""
    # notes about reading the image (shown under it)
    notes: tuple[str, ...] = field(default_factory=tuple)


def preset_window(values: PixelValues, preset: str) -> tuple[float, float] | None:
    """(centre, width) of a preset over ``values`` (None for the DICOM default); ValueError for an
    unknown preset."""
    if preset == DEFAULT_PRESET:
        return None
    if preset not in WINDOW_PRESETS:
        raise ValueError(
            f"unknown window preset {preset!r}; choose one of {', '.join(PRESET_CHOICES)}"
        )
    low, high = WINDOW_PRESETS[preset]
    if values.invert:  # low values show white: the same part of the picture is mirrored
        low, high = 100.0 - high, 100.0 - low
    a, b = np.percentile(values.values, [low, high])
    width = max(1.0, float(b - a))
    return float(a + b) / 2, width


def window_of(side: ViewerSide, window: tuple[float, float] | None) -> tuple[float, float]:
    """The window a pane is shown under: the chosen one, else the image's own default."""
    if window is None:
        return side.pixels.default_center, side.pixels.default_width
    return check_window(*window)


def _number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.4g}"


def window_text(window: tuple[float, float] | None, sides: list[ViewerSide]) -> str:
    """Plain text: which window each pane shows."""
    if window is None:
        parts = [
            f"{s.title.split(' · ')[0].lower()} C {_number(s.pixels.default_center)} / "
            f"W {_number(s.pixels.default_width)} ({s.pixels.window_source})"
            for s in sides
        ]
        return "Each image under its own default window: " + "; ".join(parts)
    center, width = window
    return f"Same window on both: centre {_number(center)} / width {_number(width)} (pixel values)"


def _pane(side: ViewerSide | None, window, role: str) -> str:
    if side is None:
        return (
            f"<figure class='cx-pane cx-pane-empty' data-side='{role}'><figcaption>"
            "<b>Result</b></figcaption><div class='cx-pane-frame'><p class='cx-note'>Select a "
            "result to compare it with the query.</p></div></figure>"
        )
    center, width = window_of(side, window)
    grey = linear_window(side.pixels.values, center, width, side.pixels.invert)
    rows, cols = grey.shape
    notes = "".join(f"<p class='cx-note'>{esc(n)}</p>" for n in side.notes)
    return (
        f"<figure class='cx-pane' data-side='{role}' data-center='{center!r}' "
        f"data-width='{width!r}' data-invert='{int(side.pixels.invert)}'>"
        f"<figcaption><b>{esc(side.title)}</b> <span class='cx-note'>{esc(side.subtitle)}</span>"
        f"</figcaption><div class='cx-pane-frame'>"
        f"<img class='cx-view-img' src='{png_data_uri(grey, compress_level=3)}' "
        f"width='{cols}' height='{rows}' alt='{esc(side.title)}' draggable='false'></div>"
        f"{notes}</figure>"
    )


def _tools(center: float, width: float, preset: str | None) -> str:
    """The toolbar: window presets, centre / width inputs (pixel values), zoom."""
    presets = "".join(
        f"<button type='button' class='cx-preset{' cx-on' if name == preset else ''}' "
        f"data-preset='{esc(name)}' aria-pressed='{'true' if name == preset else 'false'}'>"
        f"{esc(name)}</button>"
        for name in PRESET_CHOICES
    )
    return (
        "<div class='cx-tools'><div class='cx-tool-group' role='group' aria-label='window'>"
        f"<span class='cx-tool-label'>Window</span>{presets}"
        "<label class='cx-win-field'>centre <input type='number' class='cx-win-center' "
        f"step='any' value='{_number(center)}' aria-label='window centre'></label>"
        "<label class='cx-win-field'>width <input type='number' class='cx-win-width' "
        f"step='any' min='1' value='{_number(width)}' aria-label='window width'></label>"
        "<button type='button' class='cx-win-apply' data-apply='1'>Apply</button></div>"
        "<div class='cx-tool-group cx-zoom' role='group' aria-label='zoom'>"
        "<span class='cx-tool-label'>Zoom</span>"
        "<button type='button' data-zoom='out' title='Zoom out'>−</button>"
        "<button type='button' data-zoom='fit' title='Fit both images'>Fit</button>"
        "<button type='button' data-zoom='in' title='Zoom in'>+</button>"
        "<span class='cx-zoom-level'>100%</span></div>"
        "<span class='cx-note'>Drag on an image: left/right = width, up/down = centre; wheel "
        "zooms both; Shift-drag pans.</span></div>"
    )


def compare_html(
    query: ViewerSide,
    result: ViewerSide | None,
    window: tuple[float, float] | None,
    preset: str | None = DEFAULT_PRESET,
) -> str:
    """The toolbar, both panes (escaped; images rendered under ``window``) and the window
    read-out. The page script reads ``data-center`` / ``data-width`` / ``data-span`` to drag;
    ``preset`` is the preset button shown pressed (None: a window typed or dragged)."""
    sides = [query] + ([result] if result is not None else [])
    span = max(1.0, query.pixels.high - query.pixels.low)
    if result is not None:
        span = max(span, result.pixels.high - result.pixels.low)
    if window is None:
        center, width = query.pixels.default_center, query.pixels.default_width
    else:
        center, width = check_window(*window)
    return (
        f"<div class='cx-viewer' data-center='{center!r}' data-width='{width!r}' "
        f"data-span='{span!r}'>{_tools(center, width, preset)}"
        f"<div class='cx-panes'>{_pane(query, window, 'query')}"
        f"{_pane(result, window, 'result')}</div>"
        f"<p class='cx-window-readout'>{esc(window_text(window, sides))}</p></div>"
    )


def parse_window(center: object, width: object) -> tuple[float, float]:
    """A typed window; ValueError naming the problem (empty, not a number, width below 1)."""
    if (
        center in (None, "")
        or width in (None, "")
        or any(isinstance(v, float) and math.isnan(v) for v in (center, width))
    ):
        raise ValueError("type both a window centre and a width (pixel values), or pick a preset")
    return check_window(center, width)
