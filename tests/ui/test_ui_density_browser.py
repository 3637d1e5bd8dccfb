"""The out-of-distribution flag on screen: an extremity radiograph (pydicom-data's RG3, a real CR
film of a hand/limb) uploaded to a phantom-chest archive is flagged in plain words above the
results; an archived phantom case is not. Headless Chromium via Playwright, as in
test_ui_browser.py (whose launcher this module reuses); the audit record carries the flag."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_ui_browser import (
    CASE_ID,
    CHROMIUM,
    CHROMIUM_ARGS,
    REPO,
    TIMEOUT_MS,
    _choose,
    _launch,
    _open_options,
    _results_html,
    _shot,
    _wait_results_change,
    _wait_text,
    require_binary,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]

OOD_TEXT = "this image is unlike the archive: results may not be meaningful"


def _pydicom_data_file(name: str) -> Path:
    import data_store  # pydicom-data's package

    path = Path(data_store.__file__).parent / "data" / name
    assert path.is_file(), f"pydicom-data lacks {name}"
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-density")
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
        CHEXRETRIEVE_CACHE=str(root / "cache"),
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
    ingest_paths(
        [archive],
        store,
        load_stand_in("stand-in"),
        IngestConfig(workers=0),
        labels=read_label_csv(archive / "labels.csv"),
    )
    store.close()
    shutil.copy(_pydicom_data_file("RG3_UNCR.dcm"), root / "extremity-RG3.dcm")
    try:
        yield {"root": root, "db_url": db_url}
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def page(world):
    require_binary(CHROMIUM)
    from playwright.sync_api import sync_playwright

    app, url = _launch(world)
    world["lookup"] = app.case_lookup
    try:
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = chromium.new_context(viewport={"width": 1500, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            page.wait_for_selector(CASE_ID)
            yield page
            chromium.close()
    finally:
        app.close(verbose=False)


def _flag_text(page) -> str:
    return page.inner_text("#results #density-flag")


def test_an_extremity_upload_is_flagged_unlike_the_archive_and_audited(page, world):
    page.fill(CASE_ID, "3")
    page.keyboard.press("Enter")
    page.wait_for_selector("#results #density-flag")
    typical = _flag_text(page)
    assert "How typical of this archive" in typical and OOD_TEXT not in typical
    assert page.locator("#results [role=alert]#density-flag").count() == 0
    before = _results_html(page)
    page.set_input_files("#upload input[type=file]", str(world["root"] / "extremity-RG3.dcm"))
    _wait_results_change(page, before)
    flag = page.locator("#results #density-flag")
    assert flag.is_visible()
    text = _flag_text(page)
    assert OOD_TEXT in text and "0.0 % of archived images are less typical" in text
    assert flag.get_attribute("role") == "alert"
    _shot(page, "density-ood-upload")
    records = [
        json.loads(line) for line in (world["root"] / "audit.jsonl").read_text().splitlines()
    ]
    searches = [r for r in records if r["action"] == "search"]
    assert searches[0]["density"]["ood"] is False and "case" in searches[0]["query"]
    assert searches[-1]["density"]["ood"] is True and "upload_sha256" in searches[-1]["query"]


def test_the_picker_lists_rare_cases_first(page, world):
    page.click("#browse button.label-wrap, #browse > button")
    _wait_text(page, "#browse", "of 40")
    _choose(page, "#pick-status", "rare cases first")
    _wait_text(page, "#browse", "rarest first (lowest archive density)")
    options = _open_options(page, "#case-pick")
    page.keyboard.press("Escape")
    shown = [int(o.split(" ")[1]) for o in options]
    density = world["lookup"].service.density.held()
    assert shown == density.rarity_order()[: len(shown)].tolist()
    _shot(page, "density-rare-cases-first")
