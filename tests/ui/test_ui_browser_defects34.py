"""Issue 34's defects on screen (headless Chromium, Playwright): the number beside each result and
its legend, no number under the out-of-distribution flag, the compare viewer's true scale and
centred zoom, the case list closed without a choice, contrast computed from the rendered colours,
an upload named by its file, the landing page.

The archive, the server and the page are test_ui_browser.py's (imported fixtures: one archive,
one server per module). Each test fails on the code before issue 34.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import test_ui_browser as base
from test_ui_browser import (
    CASE_ID,
    MESSAGE,
    _load_case,
    _open_result,
    _results_html,
    _shot,
    _wait_results_change,
    _wait_text,
)

world, served, server, browser = base.world, base.served, base.server, base.browser
shared_page, page = base.shared_page, base.page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
FINDING = "Pleural Effusion"

#: every visible element with text of its own: its rendered text colour and the colour behind it
#: (the element's and its ancestors' backgrounds composited over white, alpha included; opacity
#: of the element and its ancestors applied to the text), its font size and weight
CONTRASTS_JS = r"""
(root) => {
  const rgba = (text) => {
    const m = text.match(/rgba?\(([^)]+)\)/);
    if (!m) return [0, 0, 0, 0];
    const v = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const over = (top, below) => {  // top composited over an opaque colour
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a));
  };
  const out = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim()) continue;
    const el = node.parentElement;
    if (!el || seen.has(el)) continue;
    seen.add(el);
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || el.getClientRects().length === 0) continue;
    if (el.closest('[disabled], [aria-disabled="true"], .hide, [hidden]')) continue;
    if (el.closest('svg, script, style, noscript')) continue;
    const chain = [];
    let opacity = 1;
    for (let e = el; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      chain.push(rgba(s.backgroundColor));
      opacity *= Number(s.opacity);
    }
    let behind = [255, 255, 255];
    for (let i = chain.length - 1; i >= 0; i--) behind = over(chain[i], behind);
    const fg = rgba(style.color);
    const text = over([fg[0], fg[1], fg[2], fg[3] * opacity], behind);
    out.push({text: node.textContent.trim().slice(0, 60), fg: text, bg: behind,
              size: parseFloat(style.fontSize), weight: Number(style.fontWeight) || 400,
              cls: (el.className && el.className.baseVal === undefined ? el.className : '')});
  }
  return out;
}
"""


def _luminance(rgb) -> float:
    """WCAG 2.x relative luminance of an sRGB colour (0..255 channels)."""
    channels = []
    for value in rgb:
        c = value / 255.0
        channels.append(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
    r, g, b = channels
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg, bg) -> float:
    high, low = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_contrast_helper_matches_published_ratios():
    assert contrast((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert contrast((118, 118, 118), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)  # #767676
    assert contrast((148, 163, 184), (248, 250, 252)) < 3.0  # Gradio Soft's subdued text


#: resolves once every running CSS transition or finite animation has ended: the colours a person
#: reads, not a frame in the middle of one (an enabled button fades in from half opacity for 0.2 s)
SETTLED_JS = """async () => {
  const finite = document.getAnimations().filter(
    (a) => Number.isFinite(a.effect && a.effect.getComputedTiming().endTime));
  await Promise.all(finite.map((a) => a.finished.catch(() => null)));
}"""


def _low_contrast(page, selector: str = "body") -> list[tuple[str, float]]:
    page.evaluate(SETTLED_JS)
    found = page.eval_on_selector(selector, CONTRASTS_JS)
    bad = []
    for item in found:
        large = item["size"] >= 24 or (item["size"] >= 18.66 and item["weight"] >= 700)
        ratio = contrast(item["fg"], item["bg"])
        if ratio < (3.0 if large else 4.5):
            bad.append((item["text"], round(ratio, 2), item["cls"]))
    return bad


def test_every_text_on_the_results_page_meets_wcag_aa_contrast(page):
    _load_case(page, 5)
    page.click("#filters button.label-wrap")  # the filters' labels too
    legend = page.eval_on_selector(
        "#results .cx-legend", "e => [getComputedStyle(e).color, e.innerText.length]"
    )
    assert legend[1] > 100  # the legend is there, and measured below
    assert _low_contrast(page) == []
    page.click("#filters button.label-wrap")
    page.get_by_role("tab", name="Curation").click()
    _wait_text(page, "#cur-table", "@1")
    assert _low_contrast(page) == []
    page.get_by_role("tab", name="Case lookup").click()


def _cells(page) -> list[str]:
    return [
        c.strip()
        for c in page.eval_on_selector_all(
            "#results tbody tr td:nth-child(3)", "cs => cs.map(c => c.innerText)"
        )
    ]


def test_an_archived_negative_query_reads_the_chance_of_a_negative_result(page, served):
    from chexretrieve.search.service import SearchRequest

    lookup = served["lookup"]
    labels = lookup.gallery.labels[FINDING]
    case = int(labels.index[(labels == 0).to_numpy()][0])
    _load_case(page, case)
    request = SearchRequest(finding=FINDING, geometry="softmax", case_id=case)
    curve = lookup.service.rank_calibration(request, 12).negative
    cells = _cells(page)
    assert cells == [f"{100 * curve.at(r):.0f} % negative" for r in range(1, len(cells) + 1)]
    known = [v for v in labels if v != -1]
    share = 100 * sum(1 for v in known if v != 1) / len(known)  # 0 and not mentioned
    legend = page.inner_text("#results .cx-legend")
    assert legend.startswith("Chance negative:")
    assert f"{share:.0f} % of the {len(known)} labelled archived cases are negative" in legend
    cards = page.eval_on_selector_all(
        "#results .cx-card .cx-sim", "es => es.map(e => e.innerText.trim())"
    )
    assert cards == cells


def test_an_upload_reads_the_chance_of_a_positive_result_and_claims_nothing_about_itself(
    page, world
):
    from PIL import Image
    from test_ui_browser import _choose

    from chexretrieve.dicom import read_radiograph, render_for_display

    path = world["root"] / "an-upload.png"
    archived = sorted((world["archive"] / "train").rglob("*.dcm"))[3]
    Image.fromarray(render_for_display(read_radiograph(archived))).save(path)
    # this small archive has 13 cases positive for lung opacity (4 for pleural effusion: too few
    # positive queries to measure a chance of a positive result on)
    before = _results_html(page)
    _choose(page, "#finding", "Lung Opacity")
    _wait_results_change(page, before)
    before = _results_html(page)
    page.set_input_files("#upload input[type=file]", str(path))
    _wait_results_change(page, before)
    cells = _cells(page)
    assert cells and all(re.fullmatch(r"\d+ % positive", c) for c in cells), cells
    legend = page.inner_text("#results .cx-legend")
    assert legend.startswith("Chance positive:")
    assert "It says nothing about the query itself (an upload has no label)" in legend
    # item 10: the upload is named by its file on screen
    assert "Query: upload an-upload.png" in page.inner_text("#query-info")
    assert "query: upload an-upload.png" in page.inner_text("#results .cx-results-title")
    before = _results_html(page)
    _choose(page, "#finding", FINDING)  # the shared page as the other tests expect it
    _wait_results_change(page, before)


def test_under_the_out_of_distribution_flag_no_result_reads_as_a_chance(page, world):
    before = _results_html(page)
    noise = world["root"] / "noise.png"
    from PIL import Image

    Image.fromarray((255 * np.random.default_rng(3).random((128, 128))).astype(np.uint8)).save(
        noise
    )
    page.set_input_files("#upload input[type=file]", str(noise))
    _wait_results_change(page, before)
    cells = _cells(page)
    assert cells and set(cells) == {"—"}  # no number beside a noise image's results
    greyed = page.eval_on_selector_all(
        "#results .cx-card .cx-sim", "es => es.map(e => [e.innerText.trim(), e.className])"
    )
    assert all(text == "—" and "cx-sim-withheld" in cls for text, cls in greyed)
    legend = page.inner_text("#results .cx-legend")
    assert legend.startswith("No chances are shown: the query is unlike the archive (")
    assert "%" not in "".join(cells + [t for t, _ in greyed])
    _shot(page, "34-ood-no-chance")


def test_the_case_list_closed_without_a_choice_changes_nothing(page):
    _load_case(page, 5)
    ids = base._result_ids(page)
    page.click("#browse button.label-wrap, #browse > button")
    _wait_text(page, "#browse", "of 40")
    page.click("#case-pick input")
    page.wait_for_selector("#case-pick li[role='option']")
    page.keyboard.press("Escape")
    page.wait_for_selector("#case-pick li[role='option']", state="detached")
    page.click("#results .cx-results-title")  # focus leaves the list
    page.wait_for_timeout(1500)  # a message would be an answer of the server: give it time
    assert page.locator(MESSAGE).count() == 0, page.inner_text(MESSAGE)
    assert base._result_ids(page) == ids and page.input_value(CASE_ID) == "5"
    page.click("#browse button.label-wrap, #browse > button")


def test_the_compare_viewer_zooms_about_the_middle_and_shows_one_to_one(page):
    _load_case(page, 5)
    _open_result(page, 1)
    label = page.inner_text("#viewer .cx-zoom-level")
    fitted = page.eval_on_selector_all(
        "#viewer .cx-view-img",
        "imgs => imgs.map(i => { const r = i.getBoundingClientRect();"
        " const [w, h] = i.dataset.stored.split('x').map(Number);"
        " return Math.min(r.width / w, r.height / h); })",
    )
    assert label == f"fit · {100 * fitted[0]:.0f} %"  # the true scale, not "100%"
    page.click("#viewer [data-zoom='in']")
    page.wait_for_function(
        "() => !document.querySelector('#viewer .cx-zoom-level').innerText.startsWith('fit')"
    )
    centres = page.eval_on_selector_all(
        "#viewer .cx-pane-frame",
        "fs => fs.map(f => [(f.scrollLeft + f.clientWidth / 2) / f.scrollWidth,"
        " (f.scrollTop + f.clientHeight / 2) / f.scrollHeight, f.scrollWidth > f.clientWidth])",
    )
    for cx, cy, scrolls in centres:  # both panes show the middle of their image
        assert scrolls and cx == pytest.approx(0.5, abs=0.02) and cy == pytest.approx(0.5, abs=0.02)
    page.click("#viewer [data-zoom='actual']")
    _wait_text(page, "#viewer .cx-zoom-level", "100 %")
    sizes = page.eval_on_selector_all(
        "#viewer .cx-view-img",
        "imgs => imgs.map(i => { const r = i.getBoundingClientRect();"
        " return [r.width, r.height].concat(i.dataset.stored.split('x').map(Number)); })",
    )
    for width, height, stored_w, stored_h in sizes:  # one stored pixel per screen pixel
        assert width == pytest.approx(stored_w, abs=1) and height == pytest.approx(stored_h, abs=1)
    page.keyboard.press("Escape")
    page.wait_for_selector("#viewer", state="hidden")


@pytest.mark.parametrize(("width", "height"), base.SIZES)
def test_the_landing_page_has_no_empty_gap_and_nothing_to_open(browser, server, width, height):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(base.TIMEOUT_MS)
    try:
        page.goto(server)
        page.wait_for_selector(CASE_ID)
        page.wait_for_timeout(500)
        assert page.locator("#open-query").is_disabled()  # no query to open yet
        upload = page.locator("#upload").bounding_box()
        below = page.locator("#open-query").bounding_box()
        gap = below["y"] - (upload["y"] + upload["height"])
        assert gap < 40, f"{gap:.0f} px of empty space under the upload box"
        _shot(page, f"34-landing-{width}x{height}", full_page=False)
    finally:
        context.close()
