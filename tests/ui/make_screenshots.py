"""Regenerate the README's screenshots of the case lookup (ui/screenshots/) on the phantom world.

    .venv/bin/python tests/ui/make_screenshots.py [--work DIR] [--n 300]

Builds (or reuses, in ``--work``) a phantom archive ingested with the bundled phantom encoder,
serves the UI on a free loopback port and drives headless Chromium through the screens (landing,
results, the results of an archived positive query, an archived negative query, an upload and an
upload unlike the archive (RG3, an extremity film), compare viewer, explanation, curation,
evaluation) at 1920x1080 and 1280x720. PNGs are
reduced to a 128-colour palette (the page is grey images and a few UI colours) and optimised.
Not a test: nothing is asserted beyond the screens appearing (the browser tests check behaviour).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "ui" / "screenshots"
SIZES = ((1920, 1080), (1280, 720))
CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 300_000  # a hang guard: a first search fits the geometry


def build_world(work: Path, n: int) -> str:
    """The phantom archive and its store under ``work`` (reused when complete); the store URL."""
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.phantom.archive import MANIFEST, write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
    from chexretrieve.store import open_store

    archive = work / "phantom"
    if not (archive / MANIFEST).is_file():
        write_archive(archive, ArchiveConfig(n=n, seed=1, workers=2, force=True), PhantomConfig())
    url = f"sqlite:///{work / 'archive.sqlite'}"
    store = open_store(url)
    labels = read_label_csv(archive / "labels.csv")
    ingest_paths([archive], store, load_encoder("phantom", "cpu"), IngestConfig(workers=2),
                 labels=labels)  # fmt: skip
    store.close()
    return url


def upload_files(work: Path) -> dict[str, Path]:
    """Two uploads: a phantom the archive does not hold (another seed), and pydicom-data's RG3, a
    real extremity film (unlike a chest archive)."""
    from chexretrieve.dicom import pydicom_test_file
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    other = work / "upload-phantom"
    if not other.exists():
        write_archive(other, ArchiveConfig(n=1, seed=77, workers=1), PhantomConfig())
    phantom = next(other.rglob("*.dcm"))
    named = work / "new-patient-chest.dcm"
    shutil.copyfile(phantom, named)
    extremity = work / "extremity-film.dcm"
    shutil.copyfile(pydicom_test_file("RG3_UNCR.dcm"), extremity)
    return {"upload": named, "unlike": extremity}


def save_png(page, path: Path) -> None:
    """A viewport screenshot as an optimised 128-colour PNG (each well under 500 kB)."""
    import io

    from PIL import Image

    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    palette = shot.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    palette.save(path, optimize=True)
    print(f"{path.relative_to(REPO)}: {path.stat().st_size / 1024:.0f} kB")


def _results_shown(page, before: str) -> None:
    """Wait for a new answer in the results area, nothing running; the results at the top of the
    window (the typicality line, the title, the legend, the cards)."""
    page.wait_for_function(
        "(prev) => { const e = document.querySelector('#results');"
        " const r = e && e.querySelector('.cx-results[data-serial]');"
        " const busy = e && e.querySelector('[data-testid=status-tracker]:not(.hide)');"
        " return r && r.outerHTML !== prev && r.querySelector('.cx-card') && !busy; }",
        arg=before,
    )
    page.evaluate(
        "() => { const e = document.querySelector('#results');"
        " window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 8); }"
    )
    page.wait_for_timeout(300)


def _answer(page) -> str:
    return page.evaluate(
        "() => { const r = document.querySelector('#results .cx-results');"
        " return r ? r.outerHTML : ''; }"
    )


def figure_screens(page, tag: str, cases: dict[str, int], uploads: dict[str, Path]) -> None:
    """The results page's chance beside each result for the four kinds of query (issue 34)."""
    for name in ("negative", "positive"):  # the positive query stays for the screens after
        before = _answer(page)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.fill("#case-id textarea, #case-id input", str(cases[name]))
        page.click("#load-case")
        _results_shown(page, before)
        save_png(page, OUT / f"results-{name}-{tag}.png")
    for name, path in uploads.items():
        before = _answer(page)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.set_input_files("#upload input[type=file]", str(path))
        _results_shown(page, before)
        save_png(page, OUT / f"results-{name}-{tag}.png")


def drive(url: str, query_case: int, cases: dict[str, int], uploads: dict[str, Path]) -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        for width, height in SIZES:
            tag = f"{width}x{height}"
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            page.wait_for_selector("#case-id textarea, #case-id input")
            page.wait_for_timeout(500)  # fonts settle
            save_png(page, OUT / f"landing-{tag}.png")

            page.fill("#case-id textarea, #case-id input", str(query_case))
            page.click("#load-case")
            page.wait_for_selector("#results .cx-results[data-serial] .cx-card")
            page.wait_for_selector("#results [data-testid=status-tracker].hide", state="attached")
            page.locator("#results").scroll_into_view_if_needed()
            page.evaluate("() => window.scrollTo(0, 0)")
            save_png(page, OUT / f"results-{tag}.png")
            figure_screens(page, tag, cases, uploads)
            page.evaluate("() => window.scrollTo(0, 0)")
            before = _answer(page)
            page.fill("#case-id textarea, #case-id input", str(query_case))
            page.click("#load-case")
            _results_shown(page, before)
            page.evaluate("() => window.scrollTo(0, 0)")

            page.locator("#results .cx-card").nth(0).click()
            page.wait_for_selector("#viewer .cx-pane[data-side='result'] .cx-view-img")
            page.wait_for_timeout(500)
            save_png(page, OUT / f"compare-viewer-{tag}.png")
            page.keyboard.press("Escape")
            page.wait_for_selector("#viewer", state="hidden")

            page.wait_for_function(
                "() => document.querySelector('#explanation').innerText.includes('Why case')"
            )
            page.evaluate(
                "() => { const e = document.querySelector('#explanation');"
                " window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 120); }"
            )
            page.wait_for_timeout(300)
            save_png(page, OUT / f"explanation-{tag}.png")

            page.evaluate("() => window.scrollTo(0, 0)")
            page.get_by_role("tab", name="Curation").click()
            page.wait_for_selector("#cur-table table")
            text = page.input_value("#cur-edit textarea")
            if "Layering fluid at the right base." not in text:
                page.fill("#cur-edit textarea", text + "\n+ Layering fluid at the right base.")
                page.fill("#cur-desc input, #cur-desc textarea", "screenshot edit")
                page.click("#cur-save")
                page.wait_for_function(
                    "() => document.querySelector('#cur-status').innerText.includes('Draft')"
                )
            page.click("#cur-impact")
            page.wait_for_function(
                "() => document.querySelector('#cur-impact-report').innerText.includes('AUPRC')"
            )
            save_png(page, OUT / f"curation-{tag}.png")

            page.get_by_role("tab", name="Evaluation").click()
            page.wait_for_function(
                "() => document.querySelector('#report-md').innerText.length > 200"
            )
            page.wait_for_timeout(500)
            save_png(page, OUT / f"evaluation-{tag}.png")
            page.close()
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="folder for the world (kept)")
    parser.add_argument("--n", type=int, default=300, help="phantom images in the archive")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/net_ports
    from net_ports import free_port

    work = args.work or Path(tempfile.mkdtemp(prefix="chexretrieve-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in ("home", "gradio"):
        (work / name).mkdir(exist_ok=True)
    anchors = work / "anchors"  # edits of the curation screen go to a copy
    shutil.rmtree(anchors, ignore_errors=True)
    shutil.copytree(REPO / "anchors", anchors)
    os.environ.update(
        HOME=str(work / "home"),
        GRADIO_TEMP_DIR=str(work / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False",
        CHEXRETRIEVE_ANCHORS=str(anchors),
        CHEXRETRIEVE_AUDIT_LOG=str(work / "audit.jsonl"),
    )
    url = build_world(work, args.n)

    from chexretrieve.store import open_store
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig

    store = open_store(url)
    found = store.find_cases(finding="Pleural Effusion", status="positive", limit=5)
    negative = store.find_cases(finding="Pleural Effusion", status="negative", limit=5)
    store.close()
    query_case = found.cases[0].image_id if found.cases else 1
    cases = {"positive": query_case, "negative": negative.cases[0].image_id}
    uploads = upload_files(work)
    config = UIConfig(
        db_url=url,
        port=free_port(),
        feature_cache_dir=work / "features",
        reports_dir=REPO / "eval" / "reports",
        anchors_dir=anchors,
    )
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    launch_app(app, config, block=False)
    try:
        drive(f"http://127.0.0.1:{config.port}/", query_case, cases, uploads)
    finally:
        app.close(verbose=False)


if __name__ == "__main__":
    main()
