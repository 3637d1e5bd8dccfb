"""The waiting page of `serve` on an empty store in headless Chromium (issue 27): behind a login,
the login form is never reloaded under the user's fingers; once signed in, the page says to run
ingest, and after ingest the open tab turns into the case lookup by itself, still signed in (the
session lives in the store, issue 33), without the user reloading it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from net_ports import free_port
from test_ui_empty_store import (
    ENCODER,
    REPO,
    WAITING_WORDS,
    _empty_store,
    _get,
    _wait_for,
)
from ui_fakes import ingest_png_cases

from chexretrieve.ui.waiting import PAGE_RELOAD_S


def _root_conftest():
    import importlib.util
    from pathlib import Path

    name = "chexretrieve_tests_root_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).parents[1] / "conftest.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


pytestmark = [pytest.mark.browser]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TIMEOUT_MS = 120_000  # a hang guard: every wait waits for an event


def _sign_in(page, password: str) -> None:
    page.locator("input[type=password]").wait_for()
    page.locator("input[type=text]").first.fill("dr.wait")
    page.locator("input[type=password]").fill(password)
    page.locator("input[type=password]").press("Enter")


def test_the_open_tab_turns_into_the_case_lookup_after_ingest(tmp_path):
    _root_conftest().require_binary(CHROMIUM)
    from playwright.sync_api import sync_playwright

    url = _empty_store(tmp_path / "store.sqlite")
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    password = "waiting-page-test-password"
    env = {
        **os.environ,
        "CHEXRETRIEVE_TEST_ENCODERS": "1",
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path / "home"),
        "GRADIO_TEMP_DIR": str(tmp_path / "gradio"),
        "CHEXRETRIEVE_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("CHEXRETRIEVE_DB", None)
    added = subprocess.run(
        [sys.executable, "-m", "chexretrieve", "users", "add", "dr.wait", "--role", "radiologist",
         "--password-stdin", "--db", url],
        input=password + "\n", env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    command = [
        sys.executable, "-m", "chexretrieve", "serve", "--db", url, "--encoder", ENCODER,
        "--port", str(port), "--accounts", "--feature-cache", str(tmp_path / "f"),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: _get(base), "the waiting page", process)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(base)
            user = page.locator("input[type=text]").first
            user.wait_for()
            user.fill("dr.wa")
            # longer than the page's check interval: a reload would have emptied the field
            time.sleep(PAGE_RELOAD_S + 2)
            assert user.input_value() == "dr.wa"
            _sign_in(page, password)
            page.get_by_text(WAITING_WORDS).wait_for()
            assert "docker compose run --rm ingest" in page.inner_text("body")

            ingest_png_cases(url, tmp_path / "archive")
            # no goto, no reload from here: the page does it once the case lookup is served;
            # no second sign-in either: the session is the store's, not the waiting page's
            page.get_by_text("Browse the archive (10 cases)").wait_for()
            assert page.locator("input[type=password]").count() == 0
            assert WAITING_WORDS not in page.inner_text("body")
            browser.close()
    finally:
        process.terminate()
        process.communicate(timeout=30)
