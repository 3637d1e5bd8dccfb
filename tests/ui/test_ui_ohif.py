"""The OHIF viewer as served by the app, in real headless Chromium, checked on screen.

The installed OHIF ``dist/`` (``make setup``) is served by the app under test over a small
archive as real ones differ (``viewer_world``: MONOCHROME1 and MONOCHROME2 12-bit phantoms and
the real 15-bit MONOCHROME1 RG1). From a search's "Open in viewer" link:

- both viewports show the expected image: each viewport's image id names the query's and the
  result's file, and a screenshot of the image's rectangle matches that file's own pixels under
  its own DICOM window (read with pydicom here, windowed by the formula written out in
  ``viewer_world``): correlation above 0.97 (measured 0.998-1.000 here; 0.57-0.62 against the
  other viewport's file) and mean grey within 8 levels (measured 0.1-0.3);
- each viewport has its own window: a MONOCHROME1 query is shown inverted beside a MONOCHROME2
  result that is not, RG1 under its 15-bit window beside a phantom's 12-bit one, and a window
  drag on one viewport leaves the other as it was;
- nothing is fetched from outside 127.0.0.1 (every request of the browser context is seen and
  any other host is refused and recorded), and no asset of OHIF fails to load;
- without a viewer session (no link followed) the DICOMweb endpoint answers nothing.
"""

from __future__ import annotations

import io
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from net_ports import free_port
from ohif_pages import VOI_JS, load_case, open_pair
from viewer_world import build_world, file_values, voi

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TIMEOUT_MS = 120_000  # a hang guard: OHIF's first load compiles 20 MB of scripts


def _root_conftest():
    import importlib.util
    import sys

    name = "chexretrieve_tests_root_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from chexretrieve.viewer_web.ohif import default_ohif_dir

    installed = (default_ohif_dir() / "index.html").is_file()
    _root_conftest().require(installed, f"the OHIF Viewer in {default_ohif_dir()} (make setup)")
    yield from build_world(tmp_path_factory.mktemp("ui-ohif"))


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
    yield {"url": f"http://127.0.0.1:{config.port}/", "paths": paths, "root": world["root"]}
    app.close(verbose=False)


@pytest.fixture(scope="module")
def browser_page(served):
    _root_conftest().require_binary(CHROMIUM)
    from playwright.sync_api import sync_playwright

    outside, failed = [], []

    def guard(route):
        host = urlsplit(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 900})
        context.route("**/*", guard)
        context.on(
            "response",
            lambda r: r.status >= 400 and "/viewer/" in r.url and failed.append((r.status, r.url)),
        )
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(served["url"])
        page.wait_for_selector("#case-id textarea, #case-id input")
        yield {"page": page, "outside": outside, "failed": failed, "browser": browser}
        browser.close()


def _kinds(served) -> dict[str, list[int]]:
    kinds: dict[str, list[int]] = {"rg1": [], "mono1": [], "mono2": []}
    for case, path in sorted(served["paths"].items()):
        if path.name == "rg1.dcm":
            kinds["rg1"].append(case)
        else:
            kinds["mono1" if file_values(path)[1] else "mono2"].append(case)
    return kinds


def _sop_uid(path: Path) -> str:
    import pydicom

    return str(pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID)


def _on_screen(tab, rect) -> np.ndarray:
    from PIL import Image

    x, y, w, h = rect
    png = tab.screenshot(clip={"x": x + 1, "y": y + 1, "width": w - 2, "height": h - 2})
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("L"), dtype=np.float64)


def _expected(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """The file's pixels under its own DICOM window, at the size they are painted."""
    from PIL import Image

    values, invert, window = file_values(path)
    assert window is not None
    grey = voi(values, *window, invert)
    resized = Image.fromarray(grey).resize((shape[1], shape[0]), Image.BILINEAR)
    return np.asarray(resized, dtype=np.float64)


def _correlation(screen: np.ndarray, path: Path) -> tuple[float, float, float]:
    """Correlation and mean greys of the middle of the image on screen and of ``path``'s own
    windowed pixels at that size (OHIF's overlays, dates and W/L text, sit at the edges)."""
    expected = _expected(path, screen.shape)
    h, w = screen.shape
    inner = (slice(h // 8, h - h // 8), slice(w // 8, w - w // 8))
    a, b = screen[inner].ravel(), expected[inner].ravel()
    return float(np.corrcoef(a, b)[0, 1]), float(a.mean()), float(b.mean())


def _check_viewport(tab, shown: dict, path: Path, other: Path) -> np.ndarray:
    """The viewport shows ``path`` under its own window: its image id names the file, the picture
    correlates above 0.97 with the file's windowed pixels (and better than with ``other``, the
    file of the other viewport), the mean grey is within 8 levels."""
    assert _sop_uid(path) in shown["imageId"], (shown["imageId"], path)
    screen = _on_screen(tab, shown["rect"])
    correlation, mean, expected_mean = _correlation(screen, path)
    assert correlation > 0.97, (path.name, correlation)
    assert abs(mean - expected_mean) < 8, (path.name, mean, expected_mean)
    assert correlation > _correlation(screen, other)[0], (path.name, other.name)
    return screen


def test_ohif_shows_a_monochrome1_query_beside_a_monochrome2_result(browser_page, served):
    kinds = _kinds(served)
    query, result = kinds["mono1"][0], kinds["mono2"][0]
    tab, shown = open_pair(browser_page["page"], query, result, served["url"])
    try:
        assert [s["invert"] for s in shown] == [True, False]  # each its own photometry
        pair = served["paths"][query], served["paths"][result]
        left = _check_viewport(tab, shown[0], *pair)
        right = _check_viewport(tab, shown[1], *pair[::-1])
        assert left.shape[0] > 200 and right.shape[0] > 200  # side by side, not thumbnails
        # a window drag on the left viewport changes its window only
        before = [s["voi"] for s in shown]
        x, y, w, h = shown[0]["rect"]
        tab.mouse.move(x + w / 2, y + h / 2)
        tab.mouse.down()
        tab.mouse.move(x + w / 2 + 120, y + h / 2 + 60, steps=8)
        tab.mouse.up()
        tab.wait_for_function(
            f"(b) => {{ const v = ({VOI_JS})();"
            " return v[0][0] !== b[0][0] || v[0][1] !== b[0][1]; }",
            arg=before,
        )
        after = tab.evaluate(VOI_JS)
        assert after[0] != before[0] and after[1] == before[1]
    finally:
        tab.close()
    assert browser_page["outside"] == [] and browser_page["failed"] == []


def test_ohif_shows_rg1_beside_a_phantom_each_under_its_own_window(browser_page, served):
    kinds = _kinds(served)
    rg1, phantom = kinds["rg1"][0], kinds["mono2"][1]
    tab, shown = open_pair(browser_page["page"], rg1, phantom, served["url"])
    try:
        # RG1's own 15000 / 30000 (15-bit) and the phantom's 2048 / 4096 (12-bit), by PS3.3
        pair = served["paths"][rg1], served["paths"][phantom]
        for s, path, other in zip(shown, pair, pair[::-1], strict=True):
            _, _, (c, w) = file_values(path)
            assert s["voi"] == pytest.approx([c - 0.5 - (w - 1) / 2, c - 0.5 + (w - 1) / 2])
            _check_viewport(tab, s, path, other)
        assert shown[0]["voi"] != shown[1]["voi"]
        assert (shown[0]["cols"], shown[0]["rows"]) == (1841, 1955)  # the stored pixels
    finally:
        tab.close()
    assert browser_page["outside"] == [] and browser_page["failed"] == []


def test_dicomweb_answers_only_studies_a_viewer_session_was_given(browser_page, served):
    """Outside the browser's session: no cookie, or a made-up one, gets nothing."""
    kinds = _kinds(served)
    load_case(browser_page["page"], kinds["mono2"][0])  # the browser got grants, we did not
    import pydicom

    study = str(pydicom.dcmread(served["paths"][kinds["mono2"][0]]).StudyInstanceUID)
    base = served["url"].rstrip("/")
    for path in ("/dicomweb/studies", f"/dicomweb/studies/{study}/series",
                 f"/dicomweb/studies/{study}/metadata"):  # fmt: skip
        for cookie in (None, "chexretrieve-viewer=made-up"):
            request = urllib.request.Request(base + path)
            if cookie:
                request.add_header("Cookie", cookie)
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    assert answer.status == 200 and answer.read() == b"[]", path  # empty list
            except urllib.error.HTTPError as refused:
                assert refused.code == 404, (path, refused.code)


def test_viewer_and_dicomweb_sit_behind_the_apps_login(world, browser_page):
    """With `serve --accounts`, every viewer route is 401 until the same sign-in as the case
    lookup; after it, the viewer's files are served to that session."""
    from chexretrieve.accounts.book import AccountBook
    from chexretrieve.store import open_store
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig

    store = open_store(world["db_url"])
    try:
        if "clinician" not in {r.name for r in AccountBook(store).list()}:
            AccountBook(store).add("clinician", "radiologist", "s3cret-pass-long")
    finally:
        store.close()
    config = UIConfig(
        db_url=world["db_url"], encoder="stand-in", port=free_port(),
        feature_cache_dir=world["root"] / "features", reports_dir=world["root"] / "reports",
        sign_in="accounts",
    )  # fmt: skip
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    launch_app(app, config, block=False)
    url = f"http://127.0.0.1:{config.port}"
    routes = [
        "/viewer/", "/viewer/viewer?StudyInstanceUIDs=1.2", "/viewer/app-config.js",
        "/viewer/open?grant=x&studies=1.2", "/dicomweb/studies", "/dicomweb/studies/1.2/series",
    ]  # fmt: skip
    try:
        for path in routes:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=30)
            assert refused.value.code == 401, path
        context = browser_page["browser"].new_context()  # its own cookies
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url)
        page.fill("input[type=text]", "clinician")
        page.fill("input[type=password]", "s3cret-pass-long")
        page.click("button:has-text('Login')")
        page.wait_for_selector("#case-id textarea, #case-id input")
        answer = page.request.get(url + "/viewer/app-config.js")
        assert answer.status == 200 and "window.config" in answer.text()
        assert page.request.get(url + "/dicomweb/studies").json() == []  # no search yet
        forged = page.request.get(url + "/viewer/open?grant=x&studies=1.2", max_redirects=0)
        assert forged.status == 403
        context.close()
    finally:
        app.close(verbose=False)


def _overlay_text(value: str | None, age: str | None) -> str:
    """The top right corner written out here: sex, then the age in years from PatientAge."""
    years = f"{int(age[:-1])} years" if age and age.endswith("Y") else age
    return " ".join(v for v in (value, years) if v)


def test_the_study_list_starts_with_the_query_and_the_corners_name_sex_age_and_view(
    browser_page, served
):
    """Issue 34, item 12: OHIF listed the newer result above the query (the left viewport), and
    its corners showed only the date and the window."""
    import pydicom

    headers = {i: pydicom.dcmread(p, stop_before_pixels=True) for i, p in served["paths"].items()}
    query = min(headers, key=lambda i: str(headers[i].StudyDate))  # the oldest study: RG1
    page = browser_page["page"]
    load_case(page, query)
    shown = page.eval_on_selector_all(
        "#results tr[data-case]", "rows => rows.map(r => Number(r.dataset.case))"
    )
    result = max(shown, key=lambda i: str(headers[i].StudyDate))  # newer: listed first before
    assert str(headers[result].StudyDate) > str(headers[query].StudyDate)
    tab, _ = open_pair(page, query, result, served["url"])
    try:
        dates = tab.eval_on_selector_all(
            "[data-cy='studyBrowser-panel'] [data-cy='study-browser-thumbnail']",
            "items => items.map(e => e.getBoundingClientRect().y)",
        )
        assert len(dates) == 2
        panel = tab.inner_text("[data-cy='studyBrowser-panel']")

        def shown_date(header) -> str:
            import datetime as dt

            return dt.datetime.strptime(str(header.StudyDate), "%Y%m%d").strftime("%d-%b-%Y")

        first, second = shown_date(headers[query]), shown_date(headers[result])
        assert panel.index(first) < panel.index(second), panel
        corners = tab.eval_on_selector_all(
            "[data-cy='viewport-overlay-top-right']",
            "es => es.sort((a, b) => a.getBoundingClientRect().x - b.getBoundingClientRect().x)"
            ".map(e => e.innerText.replace(/\\s+/g, ' ').trim())",
        )
        assert len(corners) == 2
        for corner, case in zip(corners, (query, result), strict=True):
            header = headers[case]
            assert _overlay_text(header.get("PatientSex"), header.get("PatientAge")) in corner
            assert f"View {header.ViewPosition}" in corner
    finally:
        tab.close()
    assert browser_page["outside"] == [] and browser_page["failed"] == []
