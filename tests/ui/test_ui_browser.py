"""The case-lookup UI in a real browser: headless Debian Chromium driven by Playwright.

One small phantom archive (40 DICOM phantoms, ingested with the test stand-in encoder) is served
in this process on a free loopback port. Screenshots go to test-artifacts/ui/ in the checkout.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest


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
TIMEOUT_MS = 60_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    try:
        yield {"root": root, "db_url": db_url, "anchors": anchors, "repo_anchors": _digest(
            REPO / "anchors")}  # fmt: skip
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
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig

    config = UIConfig(
        db_url=world["db_url"],
        encoder="stand-in",
        port=_free_port(),
        feature_cache_dir=world["root"] / "features",
        reports_dir=world["root"] / "reports",
        **overrides,
    )
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    launch_app(app, config, block=False)
    return app, f"http://127.0.0.1:{config.port}/"


@pytest.fixture(scope="module")
def server(world):
    app, url = _launch(world)
    yield url
    app.close(verbose=False)


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
    page.wait_for_selector("#case-id input")
    yield page
    context.close()


@pytest.fixture
def page(shared_page):
    shared_page.get_by_role("tab", name="Case lookup").click()
    return shared_page


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _text_changes(page, selector: str, before: str) -> str:
    """Wait until the element's text differs from ``before`` (and is not empty); return it."""
    page.wait_for_function(
        "([sel, prev]) => { const e = document.querySelector(sel);"
        " return e !== null && e.innerText.trim() !== prev && e.innerText.trim() !== ''; }",
        arg=[selector, before],
    )
    return page.inner_text(selector).strip()


def _rows_text(page, selector: str) -> str:
    found = page.query_selector(f"{selector} tbody")
    return found.inner_text().strip() if found else ""


def _table(page, selector: str) -> list[list[str]]:
    rows = page.eval_on_selector_all(
        f"{selector} tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.innerText))"
    )
    return [[c.strip() for c in row] for row in rows]


def _load_case(page, case_id: int) -> None:
    before = _rows_text(page, "#geo-table")
    page.fill("#case-id input", str(case_id))
    page.click("#load-case")
    _text_changes(page, "#geo-table tbody", before)


def _choose(page, dropdown: str, value: str) -> None:
    page.click(f"{dropdown} input")
    page.click(f"li[role='option'][aria-label='{value}']")


def test_search_by_case_switch_geometry_explain_and_feedback(page):
    _load_case(page, 5)
    cos, geo = _table(page, "#cos-table"), _table(page, "#geo-table")
    assert len(cos) == 12 and len(geo) == 12
    assert "5" not in [row[1] for row in cos + geo]  # the query itself is never a result
    assert page.locator("#geo-gallery img").count() == 12
    assert "softmax" in page.inner_text("#geo-title")
    assert "Query: case 5" in page.inner_text("#query-info")
    _shot(page, "01-search-by-case")

    softmax_ids = [row[1] for row in geo]
    softmax_rows = _rows_text(page, "#geo-table")
    _choose(page, "#geometry", "gaussian")
    page.wait_for_function(
        "() => document.querySelector('#geo-title').innerText.includes('gaussian')"
    )
    _text_changes(page, "#geo-table tbody", softmax_rows)
    gaussian_ids = [row[1] for row in _table(page, "#geo-table")]
    assert gaussian_ids != softmax_ids
    assert [row[1] for row in _table(page, "#cos-table")] == [row[1] for row in cos]

    page.locator("#geo-gallery img").nth(1).click()
    page.wait_for_function(
        "() => document.querySelector('#explanation').innerText.includes('Why case')"
    )
    explanation = page.inner_text("#explanation")
    assert f"Why case {gaussian_ids[1]} is close to case 5" in explanation
    assert "Anchor sentences both images weight most" in explanation
    assert f"Result: case {gaussian_ids[1]}" in page.inner_text("#selected-info")
    _shot(page, "02-explanation")

    before = _rows_text(page, "#geo-table")
    page.click("#mark-rel")
    page.wait_for_function(
        "() => document.querySelector('#feedback').innerText.includes('Relevant: ')"
    )
    assert f"Relevant: {gaussian_ids[1]}" in page.inner_text("#feedback")
    table = _text_changes(page, "#geo-table tbody", before)
    assert "✓" in table


def test_filter_by_view_restricts_both_rankings(page):
    _load_case(page, 8)
    total = int(re.search(r"(\d+) candidates", page.inner_text("#cos-title")).group(1))
    page.click("#filters button.label-wrap")
    page.get_by_label("AP", exact=True).check()
    before = _rows_text(page, "#geo-table")
    page.click("#search")
    _text_changes(page, "#geo-table tbody", before)
    filtered = int(re.search(r"(\d+) candidates", page.inner_text("#cos-title")).group(1))
    assert 0 < filtered < total
    for selector in ("#cos-table", "#geo-table"):
        views = {row[3] for row in _table(page, selector)}
        assert views == {"AP"}
    _shot(page, "03-filter-ap")
    page.get_by_label("AP", exact=True).uncheck()  # leave the shared page unfiltered


def test_upload_of_hostile_dicom_is_searched_and_inert(page, world):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    before = _rows_text(page, "#geo-table")
    page.set_input_files("#upload input[type=file]", str(world["root"] / "hostile.dcm"))
    page.wait_for_function(
        "() => document.querySelector('#query-info').innerText.includes('uploaded image')"
    )
    _text_changes(page, "#geo-table tbody", before)
    info = page.inner_text("#query-info")
    assert XSS in info and "<img src=x onerror=window.__xss=2>" in info  # shown as text
    assert "61 years" in info and "2024-03-05" in info
    assert page.evaluate("() => window.__xss") is None and not dialogs
    assert page.locator("#query-info script, #query-info img").count() == 0
    content = page.content()
    assert "Doe" not in content and "SECRET-PID" not in content
    assert len(_table(page, "#geo-table")) == 12
    _shot(page, "04-upload-dicom")


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
    page.click("#cur-save")
    page.wait_for_function(
        "() => document.querySelector('#cur-status').innerText.includes('lung_opacity.a@2')"
    )
    assert "1 added" in page.inner_text("#cur-status")
    saved = world["anchors"] / "findings" / "lung_opacity" / "v2-a.yaml"
    assert saved.exists() and "Patchy opacity in the right lower zone." in saved.read_text()
    page.wait_for_function(
        "() => document.querySelector('#cur-table').innerText.includes('lung_opacity.a@2')"
    )
    page.click("#cur-impact")
    page.wait_for_function(
        "() => document.querySelector('#cur-impact-report').innerText.includes('AUPRC')"
    )
    impact = page.inner_text("#cur-impact-report")
    assert "lung_opacity.a@1 → lung_opacity.a@2" in impact
    _shot(page, "05-curation")
    assert _digest(REPO / "anchors") == world["repo_anchors"]  # the repo's sets untouched


def test_evaluation_tab_shows_the_latest_report(page):
    page.get_by_role("tab", name="Evaluation").click()
    page.wait_for_function(
        "() => document.querySelector('#report-md').innerText.includes('AUPRC per finding')"
    )
    text = page.inner_text("#report-md")
    assert "Phantom retrieval report" in text
    assert page.locator("#report-md table").count() >= 1
    _shot(page, "06-evaluation")


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
    app, url = _launch(world, auth=("clinician", "s3cret-pass"), max_upload_mb=1)
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
        for password in ("wrong", "s3cret-pass"):
            page.fill("input[type=text]", "clinician")
            page.fill("input[type=password]", password)
            page.click("button:has-text('Login')")
            if password == "wrong":
                page.wait_for_selector("text=Incorrect Credentials")
        page.wait_for_selector("#case-id input")
        _shot(page, "07-after-login")
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
