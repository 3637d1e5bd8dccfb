"""``<script>`` and other markup in every DICOM text field (and in anchor sentences): inert.

Every free-text element of the archived and uploaded files carries one of eight payloads (script,
event handler, svg, an element with an id, iframe, a javascript: Markdown link, template syntax, a
table breaker). Checked twice: the HTML the UI handlers produce holds the payloads only escaped;
and in headless Chromium, after loading the hostile case, searching, opening a result and
uploading a hostile file, no dialog fired, ``window.__xss`` is unset and no injected element
exists. The app and page helpers of the UI's browser tests are imported, not copied.
"""

from __future__ import annotations

import os
import re
import shutil

import adv_crafting as craft
import pytest
import test_ui_browser as ui_browser
from adv_support import REPO, require_binary

from chexretrieve.anchors import latest_anchor_set
from chexretrieve.anchors.files import save_new_version
from chexretrieve.encoders.stand_in import load_stand_in
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
from chexretrieve.store import open_store
from chexretrieve.ui.compare import CompareViewer
from chexretrieve.ui.handlers import CaseLookup, SearchSettings

pytestmark = [
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
#: raw forms that would be live HTML or a live link if they reached the page unescaped
LIVE = re.compile(r"<\s*(script|img|svg|iframe|b id)|\]\(javascript:", re.IGNORECASE)
#: the page's own images: thumbnails and viewer panes rendered in memory as data: PNGs
OWN_IMAGES = re.compile(
    r"<img (?:class='cx-view-img' )?src='data:image/png;base64,[A-Za-z0-9+/=]*'"
)


def live_markup(html: str) -> list:
    """Live tags in ``html`` other than the page's own data: images."""
    return LIVE.findall(OWN_IMAGES.sub("", html))


HOSTILE_SENTENCES = [
    ("Small pleural effusion <script>window.__xss=7</script>", "positive"),
    ("No pleural effusion <img src=x onerror=window.__xss=8>", "negative"),
]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-markup")
    saved = dict(os.environ)
    for name in ("home", "gradio", "reports"):
        (root / name).mkdir()
    anchors = root / "anchors"
    shutil.copytree(REPO / "anchors", anchors)
    base = latest_anchor_set("Pleural Effusion", root=anchors)
    save_new_version(
        base.revised(
            sentences=[(e.text, e.polarity) for e in base.entries] + HOSTILE_SENTENCES,
            description="hostile <b id=injected-desc>x</b>",
        ),
        anchors,
    )
    os.environ.update(
        HOME=str(root / "home"),
        GRADIO_TEMP_DIR=str(root / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False",
        CHEXRETRIEVE_TEST_ENCODERS="1",
        CHEXRETRIEVE_ANCHORS=str(anchors),
        CHEXRETRIEVE_AUDIT_LOG=str(root / "audit.jsonl"),
    )
    archive = root / "archive"
    archive.mkdir()
    fields = [craft.markup_everywhere(archive / f"hostile{i}.dcm", 300 + i) for i in range(6)]
    for i in range(10):
        craft.write_small_radiograph(archive / f"plain{i}.dcm", 400 + i, size=48)
    craft.markup_everywhere(root / "upload.dcm", 999)
    db_url = f"sqlite:///{root / 'archive.sqlite'}"
    store = open_store(db_url)
    report = ingest_paths([archive], store, load_stand_in("stand-in"), IngestConfig(workers=0))
    store.close()
    try:
        yield {
            "root": root,
            "db_url": db_url,
            "anchors": anchors,
            "fields": fields[0],
            "ingested": report.counts["ingested"],
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_handlers_escape_every_payload(hostile, cases):
    assert hostile["ingested"] == 16  # markup in text fields never costs an image
    store = open_store(hostile["db_url"])
    encoder = load_stand_in("stand-in")
    service = SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        StoreAnchorProvider(store, encoder, hostile["anchors"]),
        encoder=encoder,
        config=SearchConfig(feature_cache_dir=hostile["root"] / "f"),
    )
    lookup = CaseLookup(service, store, anchors_dir=hostile["anchors"], thumbnail_px=32)
    gallery = service.gallery
    hostile_ids = [
        int(i)
        for i in gallery.image_ids
        if "<" in str(gallery.metadata.loc[int(i), "manufacturer"])
    ]
    outputs = {}
    settings = SearchSettings(finding="Pleural Effusion", geometry="softmax")
    for case_id in hostile_ids[:2]:
        query = lookup.load_case(case_id)
        geo = lookup.search(query, settings, baseline=True)
        outputs[f"case {case_id} query details"] = lookup.query_details(query, settings.finding)
        outputs[f"case {case_id} results page"] = geo.html
        viewer = CompareViewer(lookup, viewer_px=256)
        for result in geo.image_ids[:3]:
            shown = viewer.open(query, result, settings)
            outputs[f"case {case_id} result {result}"] = (
                lookup.result_details(result, finding=settings.finding)
                + lookup.explain(query, settings, result)
                + shown.images_html
                + shown.details_html
            )
    outputs["upload details"] = lookup.query_details(
        lookup.load_upload(shutil.copy(hostile["root"] / "upload.dcm", hostile["root"] / "u.dcm"))
    )
    outputs["case list"] = " ".join(label for label, _ in lookup.case_choices())
    store.close()
    shown_escaped = any("&lt;script&gt;" in html for html in outputs.values())
    for name, html in outputs.items():
        live = live_markup(html) if "list" not in name else []
        cases.check(f"handlers: {name}", not live, f"{live} in {html[:200]}")
    cases.check("payloads are shown, as text", shown_escaped)
    cases.figure("text fields with markup per file", len(hostile["fields"]))
    assert shown_escaped
    assert not {n: live_markup(h) for n, h in outputs.items() if live_markup(h) and "list" not in n}


@pytest.mark.browser
@pytest.mark.slow
def test_nothing_runs_in_the_browser(hostile, cases):
    require_binary(ui_browser.CHROMIUM)
    from playwright.sync_api import sync_playwright

    world = {"root": hostile["root"], "db_url": hostile["db_url"]}
    app, url = ui_browser._launch(world, anchors_dir=hostile["anchors"])
    dialogs: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=ui_browser.CHROMIUM, args=ui_browser.CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.set_default_timeout(ui_browser.TIMEOUT_MS)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(url)
            page.wait_for_selector(ui_browser.CASE_ID)
            ui_browser._load_case(page, 1)  # hostile0.dcm is the first file ingested
            ui_browser._open_result(page, 1)  # the compare viewer: captions, labels, details
            page.keyboard.press("Escape")
            page.wait_for_selector("#viewer", state="hidden")
            ui_browser._wait_text(page, "#explanation", "Why case")
            page.click("#browse button.label-wrap, #browse > button")
            page.click("#case-pick input")  # the case list, whose labels carry the view field
            page.keyboard.press("Escape")
            before = ui_browser._results_html(page)
            page.set_input_files("#upload input[type=file]", str(hostile["root"] / "upload.dcm"))
            ui_browser._wait_text(page, "#query-info", "upload upload.dcm")
            ui_browser._wait_results_change(page, before)
            injected = page.evaluate(
                "() => ({xss: window.__xss ?? null,"
                " b: document.querySelectorAll('#injected-b, #injected-desc').length,"
                " img: document.querySelectorAll('img[src=\"x\"], img[onerror]').length,"
                " svg: document.querySelectorAll('svg[onload]').length,"
                " iframe: document.querySelectorAll('iframe[srcdoc]').length,"
                " js: Array.from(document.querySelectorAll('a[href]'))"
                "      .filter(a => a.href.startsWith('javascript:')).length})"
            )
            info = page.inner_text("#query-info")
            ui_browser.ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ui_browser.ARTIFACTS / "adv-markup.png"), full_page=True)
            browser.close()
    finally:
        app.close(verbose=False)
    checks = {
        "no dialog fired": not dialogs,
        "window.__xss unset": injected["xss"] is None,
        "no injected element or javascript: link": sum(
            injected[k] for k in ("b", "img", "svg", "iframe", "js")
        )
        == 0,
        "payload shown as text": "<script>window.__xss=1</script>" in info,
    }
    for name, ok in checks.items():
        cases.check(f"browser: {name}", ok, f"{dialogs} {injected}")
    assert all(checks.values()), (checks, dialogs, injected)
