"""Regenerate the screenshots of the OHIF side-by-side view (ui/screenshots/ohif-*.png).

    .venv/bin/python tests/ui/make_ohif_screenshots.py [--work DIR]

Builds the small archive of the viewer tests (``viewer_world``: MONOCHROME1 and MONOCHROME2
phantoms and the real RG1 of pydicom-data), serves the app on a free loopback port, searches by
a MONOCHROME1 phantom and by RG1 in headless Chromium and follows each result's "Open in
viewer" link: OHIF with the query left and the result right, each under its own window, at
1920x1080 and 1280x720. Not a test (tests/ui/test_ui_ohif.py checks what is on screen).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = REPO / "ui" / "screenshots"
SIZES = ((1920, 1080), (1280, 720))
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def save_png(tab, path: Path) -> None:
    """A viewport screenshot as an optimised 128-colour PNG."""
    from PIL import Image

    with Image.open(io.BytesIO(tab.screenshot())) as image:
        image.convert("RGB").quantize(128).save(path, optimize=True)
    print(f"{path.relative_to(REPO)}  {path.stat().st_size // 1024} kB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="working folder (kept)")
    args = parser.parse_args()
    sys.path[:0] = [str(HERE), str(HERE.parent)]  # the UI tests' helpers and tests/net_ports
    from net_ports import free_port
    from ohif_pages import open_pair
    from playwright.sync_api import sync_playwright
    from viewer_world import build_world, file_values

    work = args.work or Path(tempfile.mkdtemp(prefix="ohif-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    world_gen = build_world(work)
    world = next(world_gen)
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig

    config = UIConfig(db_url=world["db_url"], encoder="stand-in", port=free_port(),
                      feature_cache_dir=work / "features", reports_dir=work / "reports",
                      top_k=16)  # fmt: skip
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    launch_app(app, config, block=False)
    server = f"http://127.0.0.1:{config.port}/"
    paths = {int(i): Path(p) for i, p in lookup.gallery.metadata["source_path"].items()}
    mono1 = [c for c, p in sorted(paths.items()) if p.name != "rg1.dcm" and file_values(p)[1]]
    mono2 = [c for c, p in sorted(paths.items()) if p.name != "rg1.dcm" and not file_values(p)[1]]
    rg1 = [c for c, p in paths.items() if p.name == "rg1.dcm"][0]
    pairs = {"ohif-monochrome1-vs-monochrome2": (mono1[0], mono2[0]),
             "ohif-rg1-vs-phantom": (rg1, mono2[1])}  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HOME", str(work))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for width, height in SIZES:
                context = browser.new_context(viewport={"width": width, "height": height})
                page = context.new_page()
                page.set_default_timeout(300_000)
                page.goto(server)
                page.wait_for_selector("#case-id textarea, #case-id input")
                for name, (query, result) in pairs.items():
                    tab, _ = open_pair(page, query, result, server)
                    save_png(tab, OUT / f"{name}-{width}x{height}.png")
                    tab.close()
                context.close()
            browser.close()
    finally:
        app.close(verbose=False)
        world_gen.close()


if __name__ == "__main__":
    main()
