"""The compare viewer in a real browser (headless Chromium): each image keeps its own window.

An archive as real ones differ: phantoms written MONOCHROME1 and MONOCHROME2 (12-bit) and RG1 of
pydicom-data (a real 15-bit MONOCHROME1 CR, 1841 x 1955). What is checked is what is on screen:
the image each pane shows is compared with the file's own pixels (read here with pydicom, not
with the code under test) under the DICOM linear VOI written out here, and a screenshot of each
pane must show that picture (its mean grey and its share of white / black), never a solid white
or black field. Also: zoomed in, the pane shows the stored pixels 1:1 (not the fitted 921 x 978);
"+" / "-" / "0" zoom; Tab never leaves the open viewer.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from net_ports import free_port
from viewer_world import build_world, file_values, preset_of, voi


def _root_conftest():
    """tests/conftest.py by path (every folder's conftest is named 'conftest')."""
    import importlib.util
    import sys

    name = "chexretrieve_tests_root_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).parents[1] / "conftest.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    # gradio 6.31's queue uses pandas options that pandas 3 deprecates (not our code)
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TIMEOUT_MS = 60_000  # a hang guard: every wait waits for an event
CASE_ID = "#case-id textarea, #case-id input"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    yield from build_world(tmp_path_factory.mktemp("ui-viewer"))


@pytest.fixture(scope="module")
def served(world):
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig

    config = UIConfig(
        db_url=world["db_url"], encoder="stand-in", port=free_port(),
        feature_cache_dir=world["root"] / "features", reports_dir=world["root"] / "reports",
        top_k=16,
    )  # fmt: skip
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    launch_app(app, config, block=False)
    paths = {int(i): Path(p) for i, p in lookup.gallery.metadata["source_path"].items()}
    yield {"url": f"http://127.0.0.1:{config.port}/", "paths": paths}
    app.close(verbose=False)


@pytest.fixture(scope="module")
def page(served):
    _root_conftest().require_binary(CHROMIUM)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(served["url"])
        page.wait_for_selector(CASE_ID)
        yield page
        browser.close()


def _by_kind(served) -> dict[str, list[int]]:
    """Case ids of the archive: RG1, MONOCHROME1 phantoms, MONOCHROME2 phantoms."""
    kinds: dict[str, list[int]] = {"rg1": [], "mono1": [], "mono2": []}
    for case, path in sorted(served["paths"].items()):
        if path.name == "rg1.dcm":
            kinds["rg1"].append(case)
        else:
            kinds["mono1" if file_values(path)[1] else "mono2"].append(case)
    assert kinds["rg1"] and kinds["mono1"] and kinds["mono2"], kinds
    return kinds


def _open_pair(page, query: int, result: int) -> None:
    if page.locator("#viewer").is_visible():
        page.keyboard.press("Escape")
        page.wait_for_selector("#viewer", state="hidden")
    before = page.evaluate(
        "() => { const r = document.querySelector('#results .cx-results');"
        " return r ? r.outerHTML : ''; }"
    )
    page.fill(CASE_ID, str(query))
    page.click("#load-case")
    # this load's answer (a new serial, even for the same case again), nothing still running
    page.wait_for_function(
        "([prev, id]) => { const e = document.querySelector('#results');"
        " const r = e && e.querySelector('.cx-results[data-serial]');"
        " const busy = e && e.querySelector('[data-testid=status-tracker]:not(.hide)');"
        " return r && r.outerHTML !== prev && !busy &&"
        ' r.querySelector(".cx-card[data-case=\'" + id + "\']"); }',
        arg=[before, result],
    )
    page.click(f"#results .cx-card[data-case='{result}']")
    page.wait_for_function(
        "(id) => { const t = document.querySelector('#viewer-title');"
        " return t && t.innerText.includes('case ' + id) &&"
        " document.querySelector(\"#viewer .cx-pane[data-side='result'] .cx-view-img\"); }",
        arg=result,
    )


def _preset(page, name: str) -> None:
    """Press a preset and wait for the server's answer (the button shown pressed)."""
    page.click(f"#viewer [data-preset='{name}']")
    page.wait_for_selector(f"#viewer .cx-preset.cx-on[data-preset='{name}']")


def _pane(page, side: str) -> dict:
    sel = f"#viewer .cx-pane[data-side='{side}']"
    window = page.eval_on_selector(sel, "p => [Number(p.dataset.center), Number(p.dataset.width)]")
    src = page.get_attribute(f"{sel} .cx-view-img", "src")
    head, _, data = src.partition(",")
    assert head == "data:image/png;base64"
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        sent = np.asarray(image.convert("L"))
    return {"window": tuple(window), "sent": sent, "screen": _on_screen(page, sel)}


def _on_screen(page, pane: str) -> np.ndarray:
    """A screenshot of the picture as the browser paints it (the image's content box, without
    the letterbox of object-fit), in grey."""
    from PIL import Image

    box = page.eval_on_selector(
        f"{pane} .cx-view-img",
        "i => { const r = i.getBoundingClientRect();"
        " const s = Math.min(r.width / i.naturalWidth, r.height / i.naturalHeight);"
        " const w = i.naturalWidth * s, h = i.naturalHeight * s;"
        " return {x: r.x + (r.width - w) / 2 + 1, y: r.y + (r.height - h) / 2 + 1,"
        " width: w - 2, height: h - 2}; }",
    )
    png = page.screenshot(clip=box)
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("L"))


def _check_pane(shown: dict, path: Path, preset: str) -> None:
    """The pane shows the preset on *its own* values and the file's pixels under that window."""
    values, invert, _ = file_values(path)
    center, width = shown["window"]
    expected_c, expected_w = preset_of(values, invert, preset)
    span = values.max() - values.min()
    # the preset on the fitted image's values (box-averaged when shrunk): within 2 % of the span
    assert abs(center - expected_c) < 0.02 * span and abs(width - expected_w) < 0.02 * span
    expected = voi(values, center, width, invert)
    if shown["sent"].shape == expected.shape:
        np.testing.assert_array_equal(shown["sent"], expected)
    screen = shown["screen"].astype(np.float64)
    # what is painted is that picture: same mean grey within 12 levels, not a flat field
    assert abs(screen.mean() - expected.mean()) < 12, (screen.mean(), expected.mean())
    assert screen.std() > 20
    assert (screen >= 250).mean() < 0.8 and (screen <= 5).mean() < 0.8


@pytest.mark.parametrize("preset", ["bone", "mediastinum"])
def test_monochrome1_query_and_monochrome2_result_each_keep_their_window(page, served, preset):
    kinds = _by_kind(served)
    query, result = kinds["mono1"][0], kinds["mono2"][0]
    _open_pair(page, query, result)
    _preset(page, preset)
    shown = {side: _pane(page, side) for side in ("query", "result")}
    _check_pane(shown["query"], served["paths"][query], preset)
    _check_pane(shown["result"], served["paths"][result], preset)
    assert shown["query"]["window"] != shown["result"]["window"]
    # a window typed on the result changes the result only
    page.fill("#viewer .cx-pane[data-side='result'] .cx-win-center", "1800")
    page.fill("#viewer .cx-pane[data-side='result'] .cx-win-width", "900")
    page.press("#viewer .cx-pane[data-side='result'] .cx-win-width", "Enter")
    page.wait_for_selector("#viewer .cx-pane[data-side='result'][data-width='900.0']")
    typed = _pane(page, "result")
    values, invert, _ = file_values(served["paths"][result])
    np.testing.assert_array_equal(typed["sent"], voi(values, 1800, 900, invert))
    assert _pane(page, "query")["window"] == shown["query"]["window"]


def test_rg1_beside_a_phantom_and_full_resolution_on_zoom(page, served):
    kinds = _by_kind(served)
    rg1, phantom = kinds["rg1"][0], kinds["mono2"][0]
    _open_pair(page, rg1, phantom)
    # opened on each file's own DICOM window: RG1's 15000 / 30000
    _, _, rg1_window = file_values(served["paths"][rg1])
    assert _pane(page, "query")["window"] == rg1_window
    _preset(page, "mediastinum")
    shown = {side: _pane(page, side) for side in ("query", "result")}
    _check_pane(shown["query"], served["paths"][rg1], "mediastinum")
    _check_pane(shown["result"], served["paths"][phantom], "mediastinum")
    # fitted, RG1 is sent at 921 x 978 (viewer_px 1024); zoomed in with "+": the stored pixels
    assert shown["query"]["sent"].shape == (978, 921)
    page.click("#viewer .cx-viewer")
    page.keyboard.press("+")
    page.wait_for_function(
        "() => !document.querySelector('#viewer .cx-zoom-level').innerText.startsWith('fit')"
    )
    query_img = "#viewer .cx-pane[data-side='query'] .cx-view-img[data-reduced='0']"
    page.wait_for_selector(query_img)
    full = _pane(page, "query")
    values, invert, _ = file_values(served["paths"][rg1])
    assert full["sent"].shape == (1955, 1841)
    assert full["window"] == shown["query"]["window"]  # zoom keeps the window
    np.testing.assert_array_equal(full["sent"], voi(values, *full["window"], invert))
    page.keyboard.press("-")
    page.wait_for_function(
        "() => document.querySelector('#viewer .cx-zoom-level').innerText.startsWith('fit')"
    )
    # issue 34, item 5: the label reads the true scale, and 1:1 is one stored pixel per screen
    # pixel (RG1 1841 x 1955 beside a phantom: fitted, each at its own scale)
    label = page.inner_text("#viewer .cx-zoom-level")
    fitted = page.eval_on_selector(
        "#viewer .cx-pane[data-side='query'] .cx-view-img",
        "i => { const r = i.getBoundingClientRect();"
        " return Math.min(r.width / 1841, r.height / 1955); }",
    )
    assert f"query {100 * fitted:.0f} %" in label and "result" in label, label
    page.keyboard.press("1")
    page.wait_for_function(
        "() => document.querySelector('#viewer .cx-zoom-level').innerText === '100 %'"
    )
    page.wait_for_selector(query_img)
    box = page.eval_on_selector(
        "#viewer .cx-pane[data-side='query'] .cx-view-img",
        "i => { const r = i.getBoundingClientRect(); return [r.width, r.height]; }",
    )
    assert box == [pytest.approx(1841, abs=1), pytest.approx(1955, abs=1)]
    # RG1 at 1:1 is larger than its pane: the pane shows the middle of the image, not a corner
    centre = page.eval_on_selector(
        "#viewer .cx-pane[data-side='query'] .cx-pane-frame",
        "f => [(f.scrollLeft + f.clientWidth / 2) / f.scrollWidth,"
        " (f.scrollTop + f.clientHeight / 2) / f.scrollHeight]",
    )
    assert centre == [pytest.approx(0.5, abs=0.02), pytest.approx(0.5, abs=0.02)]
    page.keyboard.press("0")


def test_the_open_viewer_keeps_the_keyboard_focus(page, served):
    kinds = _by_kind(served)
    _open_pair(page, kinds["mono2"][0], kinds["mono1"][0])
    inside = "() => document.getElementById('viewer').contains(document.activeElement)"
    seen = set()
    for key in ["Tab"] * 30 + ["Shift+Tab"] * 30:
        page.keyboard.press(key)
        assert page.evaluate(inside), f"{key} moved the focus behind the viewer"
        seen.add(page.evaluate("() => document.activeElement.outerHTML.slice(0, 60)"))
    assert len(seen) > 5  # the focus does move through the viewer's controls
    page.keyboard.press("Escape")
    page.wait_for_selector("#viewer", state="hidden")
