"""The case-lookup UI in a real browser: headless Debian Chromium driven by Playwright.

One small phantom archive (40 DICOM phantoms with labels and reports, ingested with the test
stand-in encoder) is served in this process on a free loopback port; every scenario shares it and
one page. Screenshots go to test-artifacts/ui/ in the checkout (both window sizes where the
layout is checked). The scenarios named ``test_defect_N_...`` are issue 15's defects.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from net_ports import free_port


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


require_binary = _root_conftest().require_binary
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    # gradio 6.31's queue uses pandas options that pandas 3 deprecates (not our code)
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
XSS = "<script>window.__xss = 1</script>"
TIMEOUT_MS = 60_000  # a hang guard: every wait below waits for an event, not for a time
#: the two window sizes the layout is checked at
SIZES = ((1920, 1080), (1280, 720))
#: cases per picker page in this world (40 cases: three pages)
PAGE_SIZE = 15
CASE_ID = "#case-id textarea, #case-id input"
#: Gradio's error badge on a component, and its error toast
BADGES = "[data-testid='status-tracker'] .error, [data-testid='toast-body']"
MESSAGE = "#lookup-message .cx-message"


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(folder)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Environment, archive, anchors copy and an evaluation report; restored afterwards."""
    root = tmp_path_factory.mktemp("ui-browser")
    saved = dict(os.environ)
    (root / "home").mkdir()
    (root / "gradio").mkdir()
    anchors = root / "anchors"
    shutil.copytree(REPO / "anchors", anchors)
    os.environ.update(
        HOME=str(root / "home"),
        GRADIO_TEMP_DIR=str(root / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False",
        CHEXRETRIEVE_TEST_ENCODERS="1",
        CHEXRETRIEVE_ANCHORS=str(anchors),
        CHEXRETRIEVE_AUDIT_LOG=str(root / "audit.jsonl"),
    )
    from chexretrieve.encoders.stand_in import load_stand_in
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
    from chexretrieve.store import open_store

    archive = root / "phantom"
    write_archive(archive, ArchiveConfig(n=40, seed=1, workers=1), PhantomConfig(size=128))
    db_url = f"sqlite:///{root / 'archive.sqlite'}"
    store = open_store(db_url)
    report = ingest_paths(
        [archive],
        store,
        load_stand_in("stand-in"),
        IngestConfig(workers=0),
        labels=read_label_csv(archive / "labels.csv"),
    )
    assert report.counts["ingested"] == 40
    store.close()
    _write_report(root / "reports")
    _write_hostile_dicom(root / "hostile.dcm")
    (root / "notes.dcm").write_text("meeting notes, not an image\n", encoding="utf-8")
    try:
        yield {"root": root, "db_url": db_url, "anchors": anchors, "archive": archive,
               "repo_anchors": _digest(REPO / "anchors")}  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _write_report(folder: Path) -> None:
    import pandas as pd

    from chexretrieve.evaluation.report import EvaluationReport, write_report

    table = pd.DataFrame(
        {"finding": ["Pleural Effusion", "Edema", "Average"], "softmax": [0.62, 0.48, 0.55]}
    ).set_index("finding")
    write_report(
        EvaluationReport(
            title="Phantom retrieval report",
            command="chexretrieve eval retrieval",
            source="test archive",
            extra_tables={"AUPRC per finding": table},
        ),
        folder / "phantom-test",
    )


def _write_hostile_dicom(path: Path) -> None:
    import warnings

    from chexretrieve.dicom.write import derive_uid, write_radiograph

    y, x = np.mgrid[0:128, 0:128]
    values = (4095 * np.exp(-((x - 64) ** 2 + (y - 70) ** 2) / 1500.0)).astype(np.uint16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # CS value with markup, on purpose
        write_radiograph(
            path,
            values,
            {
                "PatientID": "SECRET-PID-7",
                "PatientName": "Doe^Jane",
                "StudyInstanceUID": derive_uid("hostile", 1),
                "SeriesInstanceUID": derive_uid("hostile", 2),
                "SOPInstanceUID": derive_uid("hostile", 3),
                "Modality": "CR",
                "PatientSex": "F",
                "PatientAge": "061Y",
                "StudyDate": "20240305",
                "ViewPosition": "PA",
                "Manufacturer": XSS,
                "BodyPartExamined": "<img src=x onerror=window.__xss=2>",
            },
        )


def _launch(world, **overrides):
    """Serve the UI over ``world``; (app, url). ``app.case_lookup`` is the server's CaseLookup."""
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig

    users = overrides.pop("users", ())  # (name, role, password): accounts to sign in with
    if users:
        from chexretrieve.accounts.book import AccountBook
        from chexretrieve.store import open_store

        store = open_store(world["db_url"])
        book = AccountBook(store)
        known = {r.name for r in book.list()}
        for name, role, password in users:
            if name not in known:
                book.add(name, role, password)
        store.close()
        overrides.setdefault("sign_in", "accounts")
    config = UIConfig(
        db_url=world["db_url"],
        encoder="stand-in",
        port=free_port(),
        feature_cache_dir=world["root"] / "features",
        reports_dir=world["root"] / "reports",
        **overrides,
    )
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    app.case_lookup = lookup
    launch_app(app, config, block=False)
    return app, f"http://127.0.0.1:{config.port}/"


@pytest.fixture(scope="module")
def served(world):
    app, url = _launch(world, case_page_size=PAGE_SIZE)
    yield {"url": url, "lookup": app.case_lookup}
    app.close(verbose=False)


@pytest.fixture(scope="module")
def server(served):
    return served["url"]


@pytest.fixture(scope="module")
def browser():
    require_binary(CHROMIUM)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shared_page(browser, server):
    """One page for the scenarios (a page load costs seconds on a busy 2-core machine)."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server)
    page.wait_for_selector(CASE_ID)
    yield page
    context.close()


@pytest.fixture
def page(shared_page):
    _close_viewer(shared_page)
    shared_page.set_viewport_size({"width": 1500, "height": 1000})
    shared_page.get_by_role("tab", name="Case lookup").click()
    return shared_page


def _shot(page, name: str, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def _wait_text(page, selector: str, needle: str) -> str:
    page.wait_for_function(
        "([sel, needle]) => { const e = document.querySelector(sel);"
        " return e !== null && e.innerText.includes(needle); }",
        arg=[selector, needle],
    )
    return page.inner_text(selector)


def _results_html(page) -> str:
    """The results the server sent last (without Gradio's progress overlay)."""
    return page.eval_on_selector("#results", "e => e.querySelector('.cx-results').outerHTML")


def _wait_results_change(page, before: str) -> None:
    """Wait until the results area holds a new search answer (numbered by the server, not the
    placeholder a new query shows first) and no action on it is running."""
    page.wait_for_function(
        "(prev) => { const e = document.querySelector('#results');"
        " const r = e && e.querySelector('.cx-results[data-serial]');"
        " const busy = e && e.querySelector('[data-testid=status-tracker]:not(.hide)');"
        " return r && r.outerHTML !== prev && !busy; }",
        arg=before,
    )


def _result_ids(page) -> list[int]:
    return page.eval_on_selector_all(
        "#results tr[data-case]", "rows => rows.map(r => Number(r.dataset.case))"
    )


def _selected_ids(page) -> set[int]:
    return set(
        page.eval_on_selector_all(
            "#results .cx-selected", "items => items.map(e => Number(e.dataset.case))"
        )
    )


def _table(page) -> list[list[str]]:
    rows = page.eval_on_selector_all(
        "#results tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.innerText))"
    )
    return [[c.strip() for c in row] for row in rows]


def _message(page) -> str:
    """The message above the results ('' when there is none)."""
    return page.eval_on_selector(
        "#lookup-message",
        "e => { const m = e.querySelector('.cx-message'); return m ? m.innerText.trim() : ''; }",
    )


def _load_case(page, case_id) -> None:
    before = _results_html(page)
    page.fill(CASE_ID, str(case_id))
    page.click("#load-case")
    _wait_results_change(page, before)
    page.wait_for_selector("#results .cx-card")


def _try_case(page, text: str) -> str:
    """Type ``text`` as a case id that is refused; the (new) message it gets."""
    before = _message(page)
    page.fill(CASE_ID, text)
    page.click("#load-case")
    page.wait_for_function(
        "(prev) => { const m = document.querySelector('#lookup-message .cx-message');"
        " return m !== null && m.innerText.trim() !== prev; }",
        arg=before,
    )
    return _message(page)


def _choose(page, dropdown: str, value: str) -> None:
    page.click(f"{dropdown} input")
    page.click(f"{dropdown} li[role='option'][aria-label='{value}']")
    page.wait_for_selector(f"{dropdown} li[role='option']", state="detached")


_OPTIONS_READY = """([selector, suffix]) => {
    const labels = [...document.querySelectorAll(selector)].map(i => i.getAttribute('aria-label'));
    return labels.length > 0 && labels.every(l => l.endsWith(suffix)) ? labels : null;
}"""


def _open_options(page, dropdown: str, every_ends_with: str = "") -> list[str]:
    """Open ``dropdown`` and return its option labels, once they are shown (all ending with
    ``every_ends_with``): a list another dropdown left open, or choices still being replaced
    by the server, are never read."""
    page.click(f"{dropdown} input")
    selector = f"{dropdown} li[role='option']"
    handle = page.wait_for_function(
        _OPTIONS_READY, arg=[selector, every_ends_with], timeout=TIMEOUT_MS
    )
    return handle.json_value()


def _open_result(page, rank: int) -> int:
    """Click the result at ``rank`` (1-based) and wait for the compare viewer; its case id."""
    card = page.locator("#results .cx-card").nth(rank - 1)
    case_id = int(card.get_attribute("data-case"))
    card.click()
    page.wait_for_selector("#viewer .cx-pane[data-side='result'] .cx-view-img")
    _wait_text(page, "#viewer-title", f"case {case_id}")
    return case_id


def _close_viewer(page) -> None:
    if page.locator("#viewer").is_visible():
        page.keyboard.press("Escape")
        page.wait_for_selector("#viewer", state="hidden")


def _viewer_pixels(page, side: str) -> np.ndarray:
    from PIL import Image

    src = page.get_attribute(f"#viewer .cx-pane[data-side='{side}'] .cx-view-img", "src")
    head, _, data = src.partition(",")
    assert head == "data:image/png;base64"
    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        return np.asarray(image)


def _audit(world) -> list[dict]:
    path = world["root"] / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _source_of(served, case_id: int) -> Path:
    return Path(served["lookup"].gallery.metadata.loc[case_id, "source_path"])


# ----------------------------------------------------------------------------- the main path
def test_search_by_case_one_ranking_with_labels_reports_and_explanation(page, world):
    assert page.input_value(CASE_ID) == ""  # the case id box starts empty, not at 0
    _shot(page, "01-landing")
    _load_case(page, 5)
    ids = _result_ids(page)
    assert len(ids) == 12 and 5 not in ids  # the query itself is never a result
    assert page.locator("#results table").count() == 1  # one ranking
    assert page.locator("#results .cx-card img").count() == 12
    head = page.inner_text("#results thead")
    assert "chance" in head and "report" in head and "Pleural Effusion" in head
    legend = page.inner_text("#results .cx-legend")  # a calibrated chance (issues 24, 34)
    assert re.match(r"Chance (positive|negative): when \d+ archived cases", legend)
    first = page.inner_text("#results tbody tr:first-child td:nth-child(3)")
    assert re.fullmatch(r"\d+ % (positive|negative)", first)
    reports = [row[-1] for row in _table(page)]
    assert sum(1 for r in reports if r != "—") >= 10  # phantom reports reach the table
    info = page.inner_text("#query-info")
    assert "Query: case 5" in info and "Labels" in info and "Report" in info
    _shot(page, "02-results")

    case_id = _open_result(page, 2)
    _close_viewer(page)
    explanation = _wait_text(page, "#explanation", "Why case")
    assert f"Why case {case_id} is close to case 5" in explanation
    assert "Both images weigh ‘" in explanation
    assert "Anchor sentences both images weight most" in explanation
    selected = page.inner_text("#selected-info")
    assert f"Result: case {case_id}" in selected and "Report" in selected
    assert _selected_ids(page) == {case_id}
    _shot(page, "03-explanation")


def test_cosine_baseline_column_and_geometry_switch(page):
    _load_case(page, 8)
    softmax_ids = _result_ids(page)
    before = _results_html(page)
    page.get_by_label("Cosine baseline column").check()
    _wait_results_change(page, before)
    assert "cosine (baseline)" in page.inner_text("#results thead")
    assert all(re.fullmatch(r"#\d+ · [\d.]+", row[3]) for row in _table(page))
    assert _result_ids(page) == softmax_ids  # the ranking itself is the chosen geometry's
    before = _results_html(page)
    _choose(page, "#geometry", "Gaussian")
    _wait_results_change(page, before)
    assert "Gaussian" in page.inner_text("#results .cx-results-title")
    assert _result_ids(page) != softmax_ids
    before = _results_html(page)
    page.get_by_label("Cosine baseline column").uncheck()
    _wait_results_change(page, before)
    _choose(page, "#geometry", "Softmax")


def test_filter_by_view_restricts_the_ranking(page):
    _load_case(page, 8)
    total = int(re.search(r"([\d,]+) candidate cases", page.inner_text("#results")).group(1))
    page.click("#filters button.label-wrap")
    page.get_by_label("AP", exact=True).check()
    before = _results_html(page)
    page.click("#search")
    _wait_results_change(page, before)
    filtered = int(re.search(r"([\d,]+) candidate cases", page.inner_text("#results")).group(1))
    assert 0 < filtered < total
    assert {row[3] for row in _table(page)} == {"AP"}  # the view column
    _shot(page, "04-filter-ap")
    page.get_by_label("AP", exact=True).uncheck()  # leave the shared page unfiltered
    page.click("#filters button.label-wrap")


# ----------------------------------------------------------------------------- the compare viewer
def test_compare_viewer_windows_each_image_zooms_and_is_audited(page, world, served):
    from chexretrieve.dicom import read_pixel_values
    from chexretrieve.ui.viewer import preset_window

    _load_case(page, 5)
    case_id = _open_result(page, 1)
    entry = _audit(world)[-1]
    assert (entry["action"], entry["what"], entry["image"]) == ("view", "viewer", case_id)
    readout = page.inner_text("#viewer .cx-window-readout")
    assert readout.startswith("Each image under its own default window")
    assert "DICOM window" in readout  # each file's Window Center / Width
    assert "Labels" in page.inner_text("#viewer-details")
    assert "Both images weigh ‘" in page.inner_text("#viewer-details")
    _shot(page, "05-compare-viewer", full_page=False)

    # a preset: on each image, computed on that image's own values
    page.click("#viewer [data-preset='lung']")
    _wait_text(page, "#viewer .cx-window-readout", "lung preset on its own values")
    panes = page.eval_on_selector_all(
        "#viewer .cx-pane[data-center]", "ps => ps.map(p => [p.dataset.center, p.dataset.width])"
    )
    for (side, source), pane in zip((("query", 5), ("result", case_id)), panes, strict=True):
        own = preset_window(read_pixel_values(_source_of(served, source), max_side=1024), "lung")
        assert tuple(map(float, pane)) == pytest.approx(own), side

    # a window typed on one image: what it shows is the DICOM linear VOI of its stored values
    for side, source in (("query", 5), ("result", case_id)):
        pane = f"#viewer .cx-pane[data-side='{side}']"
        page.fill(f"{pane} .cx-win-center", "1500")
        page.fill(f"{pane} .cx-win-width", "600")
        page.press(f"{pane} .cx-win-width", "Enter")
        _wait_text(page, "#viewer .cx-window-readout", f"{side} C 1500 / W 600 (set on")
        values = read_pixel_values(_source_of(served, source), max_side=1024)
        shown = _viewer_pixels(page, side)
        low, high = 1500 - 0.5 - 599 / 2, 1500 - 0.5 + 599 / 2
        x = values.values.astype(np.float64)
        naive = np.where(x <= low, 0, np.where(x > high, 255, ((x - 1499.5) / 599 + 0.5) * 255))
        naive = np.rint(naive).astype(np.uint8)
        np.testing.assert_array_equal(shown, 255 - naive if values.invert else naive)

    # a bad typed window is a message; the images and the toolbar stay
    page.fill("#viewer .cx-pane[data-side='query'] .cx-win-width", "0.2")
    page.press("#viewer .cx-pane[data-side='query'] .cx-win-width", "Enter")
    assert "width must be at least 1" in _wait_text(page, "#viewer-message", "width")
    assert page.locator("#viewer .cx-view-img").count() == 2

    # drag on the query: right widens its window; the result keeps its own
    result_before = page.get_attribute("#viewer .cx-pane[data-side='result']", "data-width")
    box = page.locator("#viewer .cx-pane[data-side='query'] .cx-view-img").bounding_box()
    x0, y0 = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x0 + 120, y0 + 40, steps=6)
    page.mouse.up()
    readout = _wait_text(page, "#viewer .cx-window-readout", "(set on this image); result")
    center, width = map(float, re.search(r"query C ([\d.]+) / W ([\d.]+)", readout).groups())
    assert width > 600 and center > 1500
    assert page.get_attribute("#viewer .cx-pane[data-side='result']", "data-width") == (
        result_before
    )

    # zoom: both images grow together from their fitted size; Fit returns; Escape closes
    fitted = page.eval_on_selector_all(
        "#viewer .cx-view-img",
        "imgs => imgs.map(i => { const r = i.getBoundingClientRect();"
        " const fit = Math.min(r.width / i.naturalWidth, r.height / i.naturalHeight);"
        " return fit * i.naturalWidth; })",
    )
    page.click("#viewer [data-zoom='in']")
    page.wait_for_function(
        "() => !document.querySelector('#viewer .cx-zoom-level').innerText.startsWith('fit')"
    )
    sizes = page.eval_on_selector_all(
        "#viewer .cx-view-img", "imgs => imgs.map(i => i.getBoundingClientRect().width)"
    )
    assert sizes == [pytest.approx(1.5 * f, abs=2) for f in fitted]
    page.click("#viewer [data-zoom='fit']")
    _wait_text(page, "#viewer .cx-zoom-level", "fit · ")
    page.keyboard.press("Escape")
    page.wait_for_selector("#viewer", state="hidden")


def test_upload_of_hostile_dicom_is_searched_and_inert(page, world):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    before = _results_html(page)
    page.set_input_files("#upload input[type=file]", str(world["root"] / "hostile.dcm"))
    _wait_text(page, "#query-info", "upload hostile.dcm")
    _wait_results_change(page, before)
    info = page.inner_text("#query-info")
    assert XSS in info and "<img src=x onerror=window.__xss=2>" in info  # shown as text
    assert "61 years" in info and "2024-03-05" in info
    assert page.evaluate("() => window.__xss") is None and not dialogs
    assert page.locator("#query-info script, #query-info img").count() == 0
    # the page's text and markup, without the in-page images (base64 may spell anything)
    content = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", page.content())
    assert "Doe" not in content and "SECRET-PID" not in content
    assert len(_result_ids(page)) == 12
    _shot(page, "06-upload-dicom")


# ----------------------------------------------------------------------------- issue 15's defects
def test_defect_1_an_uploaded_archived_image_never_returns_its_own_study(page, world, served):
    lookup = served["lookup"]
    meta = lookup.gallery.metadata
    study = meta.loc[12, "study_uid"]
    same_study = {int(i) for i in meta.index[meta["study_uid"] == study]}
    copy = world["root"] / "copy-of-case-12.dcm"
    shutil.copy(_source_of(served, 12), copy)
    before = _results_html(page)
    page.set_input_files("#upload input[type=file]", str(copy))
    _wait_results_change(page, before)
    ids = _result_ids(page)
    assert len(ids) == 12 and not same_study & set(ids)


def test_defect_2_errors_are_messages_and_every_widget_stays_usable(page, world):
    _load_case(page, 5)
    assert _result_ids(page)
    message = _try_case(page, "99999")
    assert "no case 99999" in message
    assert _result_ids(page) == []  # the old results are cleared
    assert "No results yet" in page.inner_text("#results")
    assert page.locator("#upload input[type=file]").count() == 1  # the drop zone is still there
    assert page.locator("#anchor-set input").is_visible()
    assert page.locator(BADGES).count() == 0  # no Gradio error badge or toast
    assert page.input_value(CASE_ID) == "99999"  # what was typed stays

    # an empty age range: a message, the typed ages stay, the old results are kept (issue 24)
    _load_case(page, 5)
    shown = _result_ids(page)
    page.click("#filters button.label-wrap")
    page.fill("#f-age-min input", "80")
    page.fill("#f-age-max input", "20")
    page.click("#search")
    assert "age range is empty" in _wait_text(page, MESSAGE, "age")
    assert _result_ids(page) == shown
    assert page.input_value("#f-age-min input") == "80"
    assert page.input_value("#f-age-max input") == "20"
    page.fill("#f-age-min input", "0")
    page.fill("#f-age-max input", "120")
    page.click("#filters button.label-wrap")

    # a file that is not an image: the message speaks of the upload; the drop zone is back
    _load_case(page, 6)
    shown = _result_ids(page)
    page.set_input_files("#upload input[type=file]", str(world["root"] / "notes.dcm"))
    message = _wait_text(page, MESSAGE, "uploaded file")
    assert "'notes.dcm' is not a DICOM, PNG or JPEG image" in message
    assert "archive" not in message and "ingest" not in message
    assert _result_ids(page) == shown  # the previous query's results stay (issue 24)
    assert page.locator("#upload input[type=file]").count() == 1
    _shot(page, "07-error-upload")

    # the dropdowns still work: the finding changes the anchor sets offered
    _choose(page, "#finding", "Edema")
    page.wait_for_function(
        "() => document.querySelector('#anchor-set input').value.startsWith('edema.')"
    )
    _choose(page, "#finding", "Pleural Effusion")
    page.wait_for_function(
        "() => document.querySelector('#anchor-set input').value.startsWith('pleural_effusion.')"
    )


def test_defect_2_a_new_query_clears_selection_feedback_and_window(page):
    _load_case(page, 5)
    case_id = _open_result(page, 3)
    page.click("#viewer [data-preset='bone']")
    _wait_text(page, "#viewer .cx-window-readout", "bone preset on its own values")
    page.click("#viewer-mark-rel")
    _wait_text(page, "#feedback", f"Relevant: {case_id}")
    _close_viewer(page)
    _load_case(page, 9)
    assert _selected_ids(page) == set()
    assert "Click a result to compare" in page.inner_text("#explanation")
    assert "No feedback yet" in page.inner_text("#feedback")
    _open_result(page, 1)
    readout = page.inner_text("#viewer .cx-window-readout")
    assert readout.startswith("Each image under its own default window")  # not bone
    assert page.locator("#viewer .cx-preset.cx-on").inner_text() == "DICOM default"
    _close_viewer(page)


def test_defect_2_a_curation_line_without_a_sign_is_a_message(page):
    page.get_by_role("tab", name="Curation").click()
    page.wait_for_selector("#cur-table table")
    text = page.input_value("#cur-edit textarea")
    page.fill("#cur-edit textarea", text + "\nPatchy opacity without a sign.")
    page.click("#cur-save")
    status = _wait_text(page, "#cur-status", "must start with")
    assert "must start with '+' (positive) or '-' (negative)" in status
    assert page.input_value("#cur-edit textarea").endswith("Patchy opacity without a sign.")
    assert page.locator("#cur-set input").is_visible()  # the dropdown did not vanish
    assert page.locator(BADGES).count() == 0
    page.fill("#cur-edit textarea", text)


def test_defect_3_marking_not_relevant_never_leaves_a_stale_selection(page):
    _load_case(page, 7)
    case_id = _open_result(page, 2)
    _close_viewer(page)
    _wait_text(page, "#explanation", f"Why case {case_id}")
    before = _results_html(page)
    page.click("#mark-nonrel")
    _wait_results_change(page, before)
    ids = _result_ids(page)
    selected = _selected_ids(page)
    explanation = page.inner_text("#explanation")
    if case_id in ids:  # still listed: the highlight and the explanation follow the case
        assert selected == {case_id} and f"Why case {case_id}" in explanation
    else:  # gone: nothing is highlighted, nothing stale is explained
        assert selected == set() and "Why case" not in explanation
        assert f"Case {case_id} is no longer in the top" in _message(page)
    now_second = ids[1]
    page.click("#mark-rel")  # acts on the selected case or asks for one; never on rank 2's
    if case_id in ids:
        _wait_text(page, "#feedback", f"Relevant: {case_id}")
    else:
        _wait_text(page, MESSAGE, "Select a result first")
        # the message stays to be read: a mark that changed nothing starts no search that
        # would clear it (it used to, a moment after showing it)
        page.wait_for_timeout(1500)
        assert "Select a result first" in _message(page)
    if now_second != case_id:
        assert f"Relevant: {now_second}" not in page.inner_text("#feedback")
    page.click("#clear-fb")
    _wait_text(page, "#feedback", "No feedback yet")


def test_defect_4_layout_captions_and_markers_at_both_sizes(page):
    _load_case(page, 5)
    _open_result(page, 1)
    _close_viewer(page)
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(200)  # one layout pass after the resize (not a race: re-read below)
        overflow = page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"page wider than the window at {width}x{height}"
        captions = page.eval_on_selector_all(
            "#results .cx-card-text",
            "cs => cs.map(c => [c.innerText, c.scrollWidth - c.clientWidth])",
        )
        assert captions and all(cut <= 0 for _, cut in captions)
        assert all(re.search(r"#\d+ case \d+", text) for text, _ in captions[::2])
        right = page.evaluate(
            "() => Math.max(...Array.from(document.querySelectorAll("
            "'#explanation table, #results table, #selected-info table'),"
            " t => t.getBoundingClientRect().right))"
        )
        assert right <= width, f"a table leaves the window at {width}x{height}"
        label, text, zone = page.evaluate(
            "() => { const box = (r) => [r.top, r.bottom];"
            " const range = document.createRange();"
            " const words = document.querySelector('#upload [data-testid=upload-text]');"
            " range.selectNodeContents(words);"
            " return [box(document.querySelector('#upload [data-testid=block-label]')"
            ".getBoundingClientRect()), box(range.getBoundingClientRect()),"
            " box(document.querySelector('#upload').getBoundingClientRect())]; }"
        )
        assert label[1] <= text[0], f"the upload label covers the drop zone's text at {width}"
        assert zone[0] <= text[0] and text[1] <= zone[1], f"the drop text is cut at {width}"
        _assert_corners_unobscured(page, "#query-image img")
        _shot(page, f"08-results-{width}x{height}", full_page=False)
        _open_result(page, 1)
        for side in ("query", "result"):
            _assert_corners_unobscured(page, f"#viewer .cx-pane[data-side='{side}'] .cx-view-img")
        _shot(page, f"09-compare-viewer-{width}x{height}", full_page=False)
        _close_viewer(page)


def _assert_corners_unobscured(page, selector: str) -> None:
    """The top corners of the image, where radiographs carry the L/R marker, are the image."""
    hits = page.evaluate(
        "(sel) => { const img = document.querySelector(sel); img.scrollIntoView({block: 'center'});"
        " const r = img.getBoundingClientRect();"
        " const w = img.naturalWidth, h = img.naturalHeight;"
        " const s = Math.min(r.width / w, r.height / h);"
        " const x0 = r.left + (r.width - w * s) / 2, y0 = r.top + (r.height - h * s) / 2;"
        " return [[0.08, 0.08], [0.92, 0.08]].map(([fx, fy]) =>"
        "   document.elementFromPoint(x0 + fx * w * s, y0 + fy * h * s) === img); }",
        selector,
    )
    assert hits == [True, True], f"something covers a top corner of {selector}"


def test_defect_5_cosine_shows_one_ranking_and_disables_finding_and_anchors(page):
    _load_case(page, 5)
    before = _results_html(page)
    _choose(page, "#geometry", "Cosine (no anchors)")
    _wait_results_change(page, before)
    assert page.locator("#results table").count() == 1
    assert "no anchors" in page.inner_text("#results .cx-results-title")
    assert page.locator("#finding input").is_disabled()
    assert page.locator("#anchor-set input").is_disabled()
    assert "Cosine ignores the finding" in page.inner_text("#anchor-set")
    before = _results_html(page)
    _choose(page, "#geometry", "Softmax")
    _wait_results_change(page, before)
    assert page.locator("#finding input").is_enabled()
    assert page.locator("#anchor-set input").is_enabled()


def test_defect_6_a_saved_anchor_version_survives_a_reload_and_is_the_default(page, world):
    from chexretrieve.anchors import latest_anchor_set

    page.get_by_role("tab", name="Curation").click()
    page.wait_for_function(
        "() => document.querySelector('#cur-table').innerText.includes('pleural_effusion.a@1')"
    )
    text = page.input_value("#cur-edit textarea")
    page.fill("#cur-edit textarea", text + "\n+ Layering right pleural effusion.")
    page.click("#cur-publish")  # published at once (issue 24: a draft is saved first otherwise)
    _wait_text(page, "#cur-status", "pleural_effusion.a@2")
    assert latest_anchor_set("Pleural Effusion", root=world["anchors"]).key == (
        "pleural_effusion.a@2"
    )  # what `chexretrieve search` uses without --anchor-set
    page.get_by_role("tab", name="Case lookup").click()
    # the archive index serves a@1 until it has built a@2, then switches (issue 31): the list
    # says which version searches use meanwhile
    shown = page.input_value("#anchor-set input")
    assert shown in ("pleural_effusion.a@2 · latest", "pleural_effusion.a@1 · served"), shown
    deadline = time.monotonic() + 300  # a hang guard only
    while True:
        page.reload()
        page.wait_for_selector(CASE_ID)
        page.wait_for_function("() => document.querySelector('#anchor-set input').value")
        shown = page.input_value("#anchor-set input")
        if shown == "pleural_effusion.a@2 · latest":
            break
        assert shown == "pleural_effusion.a@1 · served" and time.monotonic() < deadline, shown
        page.wait_for_timeout(1000)
    options = _open_options(page, "#anchor-set")
    page.keyboard.press("Escape")
    assert "pleural_effusion.a@2 · latest" in options and "pleural_effusion.a@1" in options
    page.get_by_role("tab", name="Curation").click()  # the curation tab lists it too
    page.wait_for_function(
        "() => document.querySelector('#cur-set input').value === 'pleural_effusion.a@2'"
    )
    _wait_text(page, "#cur-table", "Layering right pleural effusion.")
    page.get_by_role("tab", name="Case lookup").click()
    _load_case(page, 5)
    assert "anchors pleural_effusion.a@2" in page.inner_text("#results .cx-results-title")


def test_defect_7_empty_search_strict_case_ids_and_a_picker_beyond_the_first_page(page, server):
    page.goto(server)  # a fresh page (a reload keeps the search in the address: issue 24)
    page.wait_for_selector(CASE_ID)
    assert page.input_value(CASE_ID) == ""
    page.click("#search")
    assert "No query yet" in _wait_text(page, MESSAGE, "No query yet")
    assert "a case id is a whole number such as 12, not '2.5'" in _try_case(page, "2.5")
    assert "case ids start at 1" in _try_case(page, "0")
    page.click("#browse button.label-wrap, #browse > button")
    info = _wait_text(page, "#browse", "cases 1–15 of 40")
    assert "(page 1 of 3)" in info
    page.click("#pick-next")
    _wait_text(page, "#browse", "cases 16–30 of 40 (page 2 of 3)")
    options = _open_options(page, "#case-pick")
    assert len(options) == PAGE_SIZE
    assert all(re.match(r"case (\d+) · .* · Pleural Effusion: \w+", o) for o in options)
    assert int(re.match(r"case (\d+)", options[0]).group(1)) > 15  # past the first page
    page.keyboard.press("Escape")
    _choose(page, "#pick-status", "positive")
    page.wait_for_function(
        "() => document.querySelector('#browse').innerText.includes('label positive')"
    )
    # the picker's choices arrive with the count line, and may still be replaced: wait for them
    options = _open_options(page, "#case-pick", every_ends_with="Pleural Effusion: positive")
    before = _results_html(page)
    page.click(f"#case-pick li[role='option'][aria-label='{options[0]}']")
    _wait_results_change(page, before)
    picked = int(re.match(r"case (\d+)", options[0]).group(1))
    assert f"Query: case {picked}" in page.inner_text("#query-info")
    _shot(page, "10-case-picker")
    _choose(page, "#pick-status", "any")


def test_defect_9_the_progress_names_the_real_work_of_a_first_search(page, served):
    """The service's scoring step is held until the page has shown which step is running, so
    the check waits for an event, never for a time."""
    lookup = served["lookup"]
    service = lookup.service
    original = service.gallery_scores
    shown, release = threading.Event(), threading.Event()

    def held(request):
        if request.geometry == "latent_spherical_posterior":
            release.wait(TIMEOUT_MS / 1000)
        return original(request)

    service.gallery_scores = held
    try:
        _load_case(page, 5)
        before = _results_html(page)
        _choose(page, "#geometry", "Posterior latent spherical")
        text = _wait_text(page, "#results", "embedding the anchors, fitting")
        shown.set()
        assert "Posterior latent spherical: embedding the anchors, fitting and ranking 40" in text
        assert re.search(r"\d+(\.\d+)?%", text)  # the bar's share of the steps
        assert not re.search(r"\d+(\.\d+)?/\d+(\.\d+)?s", text)  # no "elapsed/estimated" promise
    finally:
        release.set()
        service.gallery_scores = original
    _wait_results_change(page, before)
    assert "Posterior latent spherical" in page.inner_text("#results .cx-results-title")
    assert shown.is_set()
    _choose(page, "#geometry", "Softmax")


# ----------------------------------------------------------------------------- other tabs, safety
def test_curation_saves_a_new_version_and_measures_impact(page, world):
    page.get_by_role("tab", name="Curation").click()
    page.wait_for_selector("#cur-table table")
    _choose(page, "#cur-finding", "Lung Opacity")
    page.wait_for_function(
        "() => document.querySelector('#cur-table').innerText.includes('lung_opacity.a@1')"
    )
    text = page.input_value("#cur-edit textarea")
    assert text.startswith("+ ")
    page.fill("#cur-edit textarea", text + "\n+ Patchy opacity in the right lower zone.")
    page.fill("#cur-desc input, #cur-desc textarea", "browser test edit")
    page.click("#cur-publish")
    _wait_text(page, "#cur-status", "lung_opacity.a@2")
    assert "1 added" in page.inner_text("#cur-status")
    saved = world["anchors"] / "findings" / "lung_opacity" / "v2-a.yaml"
    assert saved.exists() and "Patchy opacity in the right lower zone." in saved.read_text()
    _wait_text(page, "#cur-table", "lung_opacity.a@2")
    page.click("#cur-impact")
    impact = _wait_text(page, "#cur-impact-report", "AUPRC")
    assert "lung_opacity.a@1 → lung_opacity.a@2" in impact
    _shot(page, "11-curation")
    assert _digest(REPO / "anchors") == world["repo_anchors"]  # the repo's sets untouched


def test_evaluation_tab_shows_the_latest_report(page):
    page.get_by_role("tab", name="Evaluation").click()
    text = _wait_text(page, "#report-md", "AUPRC per finding")
    assert "Phantom retrieval report" in text
    assert page.locator("#report-md table").count() >= 1
    _shot(page, "12-evaluation")


def test_only_rendered_images_are_served(server, world):
    """Archive files, the database and files of the working folder are refused over HTTP."""
    archived = sorted((world["root"] / "phantom").rglob("*.dcm"))[0]
    for path in (
        archived,
        world["root"] / "archive.sqlite",
        REPO / "README.md",
        Path("/etc/passwd"),
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server}gradio_api/file={path}", timeout=30)
        assert refused.value.code in (403, 404), path


def test_login_is_required_when_auth_is_on(world, browser):
    app, url = _launch(
        world, users=[("clinician", "radiologist", "s3cret-pass-long")], max_upload_mb=1
    )
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "config", timeout=30)
        assert refused.value.code == 401
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url)
        page.wait_for_selector("input[type=password]")
        assert page.locator("#case-id").count() == 0
        for password in ("wrong", "s3cret-pass-long"):
            page.fill("input[type=text]", "clinician")
            page.fill("input[type=password]", password)
            page.click("button:has-text('Login')")
            if password == "wrong":
                page.wait_for_selector("text=Incorrect Credentials")
        page.wait_for_selector(CASE_ID)
        _shot(page, "13-after-login")
        # the upload cap (1 MiB here) is enforced by the server, logged in or not
        for size, allowed in ((200_000, True), (2_000_000, False)):
            answer = page.request.post(
                url + "gradio_api/upload",
                multipart={
                    "files": {
                        "name": "big.dcm",
                        "mimeType": "application/dicom",
                        "buffer": b"\0" * size,
                    }
                },
            )
            assert answer.ok == allowed, (size, answer.status, answer.text()[:200])
            if not allowed:
                assert answer.status == 413
        context.close()
    finally:
        app.close(verbose=False)
