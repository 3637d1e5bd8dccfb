"""Issue 23, finding 2, against a real server: cases ingested while the UI serves appear in the
next search (headless Chromium, Playwright).

The archive, the server and the page are test_ui_browser.py's (its fixtures, one set for this
module). While the server runs, a separate ``chexretrieve ingest`` process adds 12 phantoms to its
store; the next click on Search must count them among the candidate cases shown on screen, and a
new case must load by its id. Before the fix the server kept its first gallery until someone
opened an unknown id.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys

import pytest
import test_ui_browser as base
from test_ui_browser import REPO, _load_case, _results_html, _shot, _wait_results_change

world, served, server, browser = base.world, base.served, base.server, base.browser
shared_page, page = base.shared_page, base.page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]

NEW = 12


def _candidates(page) -> int:
    return int(re.search(r"([\d,]+) candidate cases", page.inner_text("#results")).group(1))


def _image_ids(db_url: str) -> list[int]:
    path = db_url.removeprefix("sqlite:///")
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in connection.execute("SELECT id FROM images ORDER BY id")]
    finally:
        connection.close()


def test_cases_ingested_while_serving_appear_in_the_next_search(page, world):
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    _load_case(page, 8)
    before = _candidates(page)
    known = set(_image_ids(world["db_url"]))
    later = world["root"] / "later"
    write_archive(later, ArchiveConfig(n=NEW, seed=2, workers=1), PhantomConfig(size=128))
    ingest = subprocess.run(
        [sys.executable, "-m", "chexretrieve", "ingest", str(later), "--db", world["db_url"],
         "--encoder", "stand-in", "--workers", "1", "--no-progress"],
        cwd=REPO, env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    new_ids = sorted(set(_image_ids(world["db_url"])) - known)
    assert len(new_ids) == NEW
    shown = _results_html(page)
    page.click("#search")  # the same query, searched again: no reload, no unknown id
    _wait_results_change(page, shown)
    after = _candidates(page)
    _shot(page, "23-02-after-ingest")
    assert after == before + NEW, (before, after)
    _load_case(page, new_ids[-1])  # a new case is a query like any other
    assert _candidates(page) == after
