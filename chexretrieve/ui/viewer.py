"""The compare viewer (no Gradio): the query and one result side by side at viewing size, each
under its own window in its own pixel values.

Window rules (every image keeps its own window, as in a PACS viewport):
- No window chosen: each image under its own default, the first DICOM Window Center / Width of
  its file (a file with only a VOI LUT Sequence: the linear window over which the LUT rises; PNG /
  JPEG: the bit depth; without any of these: the value range).
- A preset: computed on *each* image's own value distribution (percentiles, mirrored for images
  whose low values show white). Radiographs have no Hounsfield scale, so a preset is a part of the
  picture: *lung* the darker part, *mediastinum* the soft-tissue middle, *bone* the brightest.
  A MONOCHROME1 query beside a MONOCHROME2 result, or a 15-bit image beside a 12-bit one, each get
  the window that shows that part of *their* picture.
- A typed or dragged window: on the one pane it was typed in or dragged on (the other keeps its
  own). Its values are that image's pixel values.
Images are rendered on the server (``chexretrieve.dicom.linear_window``) and sent as ``data:`` PNGs,
at ``viewer_px`` on the longer side when fitted and at the stored size once zoomed in (``full``);
zoom and the live preview while dragging happen in the browser (``chexretrieve.ui.page_scripts``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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


#: the two panes, in screen order
SIDES = ("query", "result")


@dataclass(frozen=True)
class ViewerSide:
    """One pane of the viewer."""

    # heading above the image ("Query · case 5", "Result #2 · case 17")
    title: str
    # the image's values at fitted viewing size (presets and defaults are computed on these)
    pixels: PixelValues
    # PHI-minimal line under the heading (view, sex, age, date)
    subtitle: str = ""
    # notes about reading the image (shown under it)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the values at the stored size, when ``pixels`` is smaller (None: ``pixels`` is full size)
    full_pixels: PixelValues | None = None


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


def pane_window(
    side: ViewerSide, preset: str | None, typed: tuple[float, float] | None
) -> tuple[tuple[float, float], str]:
    """The window one pane is shown under and where it comes from: a window typed or dragged on
    this pane, else the preset over this image's own values, else the image's own default."""
    if typed is not None:
        return check_window(*typed), "set on this image"
    if preset not in (None, DEFAULT_PRESET):
        found = preset_window(side.pixels, str(preset))
        if found is not None:
            return found, f"{preset} preset on its own values"
    return (side.pixels.default_center, side.pixels.default_width), side.pixels.window_source


def _number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.4g}"


def window_text(shown: list[tuple[str, tuple[float, float], str]]) -> str:
    """Plain text: which window each pane shows ((role, (centre, width), source) per pane)."""
    parts = [f"{role} C {_number(c)} / W {_number(w)} ({how})" for role, (c, w), how in shown]
    defaults = all(
        not how.endswith("own values") and how != "set on this image" for *_, how in shown
    )
    lead = (
        "Each image under its own default window: "
        if defaults
        else "Each image under its own window: "
    )
    return lead + "; ".join(parts)


def _pane(side: ViewerSide | None, role: str, window, how: str, full: bool) -> str:
    if side is None:
        return (
            f"<figure class='cx-pane cx-pane-empty' data-side='{role}'><figcaption>"
            "<b>Result</b></figcaption><div class='cx-pane-frame'><p class='cx-note'>Select a "
            "result to compare it with the query.</p></div></figure>"
        )
    center, width = window
    pixels = side.full_pixels if full and side.full_pixels is not None else side.pixels
    grey = linear_window(pixels.values, center, width, pixels.invert)
    rows, cols = grey.shape
    reduced = int((rows, cols) != tuple(side.pixels.stored_shape))
    span = max(1.0, side.pixels.high - side.pixels.low)
    notes = "".join(f"<p class='cx-note'>{esc(n)}</p>" for n in side.notes)
    fields = (
        f"<div class='cx-pane-window' role='group' aria-label='{role} window'>"
        f"<label class='cx-win-field'>centre <input type='number' class='cx-win-center' "
        f"step='any' value='{_number(center)}' aria-label='{role} window centre'></label>"
        f"<label class='cx-win-field'>width <input type='number' class='cx-win-width' "
        f"step='any' min='1' value='{_number(width)}' aria-label='{role} window width'></label>"
        f"<button type='button' class='cx-win-apply' data-apply='{role}'>Apply</button>"
        f"<span class='cx-note cx-win-source'>{esc(how)}</span></div>"
    )
    stored = side.pixels.stored_shape
    return (
        f"<figure class='cx-pane' data-side='{role}' data-center='{center!r}' "
        f"data-width='{width!r}' data-span='{span!r}' data-invert='{int(pixels.invert)}'>"
        f"<figcaption><b>{esc(side.title)}</b> <span class='cx-note'>{esc(side.subtitle)}</span>"
        f"</figcaption>{fields}<div class='cx-pane-frame'>"
        f"<img class='cx-view-img' src='{png_data_uri(grey, compress_level=3)}' "
        f"width='{cols}' height='{rows}' data-reduced='{reduced}' "
        f"data-stored='{stored[1]}x{stored[0]}' alt='{esc(side.title)}' draggable='false'></div>"
        f"{notes}</figure>"
    )


def _tools(preset: str | None) -> str:
    """The toolbar: window presets (each on its image's own values), zoom."""
    presets = "".join(
        f"<button type='button' class='cx-preset{' cx-on' if name == preset else ''}' "
        f"data-preset='{esc(name)}' aria-pressed='{'true' if name == preset else 'false'}'>"
        f"{esc(name)}</button>"
        for name in PRESET_CHOICES
    )
    return (
        "<div class='cx-tools'><div class='cx-tool-group' role='group' aria-label='window'>"
        f"<span class='cx-tool-label'>Window (each image its own)</span>{presets}</div>"
        "<div class='cx-tool-group cx-zoom' role='group' aria-label='zoom'>"
        "<span class='cx-tool-label'>Zoom</span>"
        "<button type='button' data-zoom='out' title='Zoom out (-)'>−</button>"
        "<button type='button' data-zoom='fit' title='Fit both images (0)'>Fit</button>"
        "<button type='button' data-zoom='in' title='Zoom in (+)'>+</button>"
        "<button type='button' data-zoom='actual' title='One stored pixel per screen pixel (1)'>"
        "1:1</button>"
        "<span class='cx-zoom-level' title='stored pixels shown per screen pixel'>fit</span></div>"
        "<span class='cx-note'>Drag on an image: left/right = its width, up/down = its centre; "
        "wheel or +/− zooms both about the middle of the view (full resolution when zoomed in); "
        "the zoom reads the true scale of each image's stored pixels; Shift-drag pans; Tab "
        "stays in the viewer; Esc closes.</span></div>"
    )


def compare_html(
    query: ViewerSide,
    result: ViewerSide | None,
    windows: Mapping[str, tuple[float, float]] | None = None,
    preset: str | None = DEFAULT_PRESET,
    full: bool = False,
) -> str:
    """The toolbar, both panes (escaped; each image under its own window) and the window
    read-out. ``windows`` holds a window typed or dragged on a pane ({"query"|"result": (centre,
    width)}); a pane without one shows ``preset`` over its own values (the DICOM default: its own
    default window). ``full``: the images at their stored size (zoomed in), else fitted. The page
    script reads each pane's ``data-center`` / ``data-width`` / ``data-span`` to drag."""
    windows = dict(windows or {})
    panes, shown = [], []
    for role, side in zip(SIDES, (query, result), strict=True):
        if side is None:
            panes.append(_pane(None, role, None, "", full))
            continue
        window, how = pane_window(side, preset, windows.get(role))
        shown.append((role, window, how))
        panes.append(_pane(side, role, window, how, full))
    return (
        f"<div class='cx-viewer' tabindex='-1' aria-label='compare viewer'>{_tools(preset)}"
        f"<div class='cx-panes'>{''.join(panes)}</div>"
        f"<p class='cx-window-readout'>{esc(window_text(shown))}</p></div>"
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


def updated_windows(
    windows: Mapping | None, side: str, window: tuple[float, float], result_id: int | None
) -> dict:
    """The viewer's window state after a window typed or dragged on ``side``: the other pane's
    window is kept; a result window remembers which result it was set on."""
    if side not in SIDES:
        raise ValueError(f"no pane {side!r} in the viewer (query or result)")
    state = dict(windows or {})
    state[side] = tuple(check_window(*window))
    if side == "result":
        state["result_id"] = result_id
    return state


def windows_for(windows: Mapping | None, result_id: int | None) -> dict:
    """The typed windows that apply to the panes showing ``result_id`` beside the query (a window
    set on another result does not carry over to this one)."""
    state = dict(windows or {})
    found = {}
    if state.get("query") is not None:
        found["query"] = tuple(state["query"])
    if state.get("result") is not None and state.get("result_id") == result_id:
        found["result"] = tuple(state["result"])
    return found
