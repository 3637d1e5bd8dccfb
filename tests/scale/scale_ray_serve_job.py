"""`serve --search-backend ray` driven in a browser, inside the Ray test cluster's namespace.

Run as ``python scale_ray_serve_job.py SPEC OUT``: starts the real ``chexretrieve serve`` with the
Ray backend against the cluster of ``SPEC``, opens a case in headless Chromium as a person does
(the case id typed, Open clicked) and writes what the page then shows as JSON: each result card's
rank and case id as read on screen, the results' title line, and the serve log's tail.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASE, FINDING = 7, "Pleural Effusion"
HANG_GUARD_S = 240  # a hang guard only: each wait ends as soon as its condition holds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_page(base: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"serve did not answer within {HANG_GUARD_S} s:\n{log.read_text()[-3000:]}")


def main(spec_path: str, out_path: str) -> None:
    from playwright.sync_api import sync_playwright

    spec = json.loads(Path(spec_path).read_text())
    root = Path(spec_path).parent
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = root / "serve-ray.log"
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1", "PYTHONPATH": str(REPO),
           "CHEXRETRIEVE_AUDIT_LOG": str(root / "audit.jsonl"),
           "GRADIO_TEMP_DIR": str(root / "gradio"), "HF_HUB_OFFLINE": "1"}  # fmt: skip
    command = [
        sys.executable, "-m", "chexretrieve", "serve", "--db", spec["db"], "--encoder",
        "stand-in:0:32", "--port", str(port), "--feature-cache", spec["features"],
        "--search-backend", "ray", "--ray-address", spec["address"],
        "--shards", str(spec["shards"]),
    ]  # fmt: skip
    with open(log, "w") as handle:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=handle,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    shown: dict = {}
    try:
        _wait_for_page(base, process, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu"])  # fmt: skip
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.set_default_timeout(HANG_GUARD_S * 1000)
            page.goto(base + "/")
            page.fill("#case-id textarea, #case-id input", str(CASE))
            page.click("#load-case")
            page.wait_for_selector("#results .cx-card")
            cards = page.locator("#results .cx-card").all_inner_texts()
            shown["cards"] = [
                [int(m.group(1)), int(m.group(2))]
                for m in (re.search(r"#(\d+)\s+case\s+(\d+)", " ".join(c.split())) for c in cards)
                if m
            ]
            shown["title"] = " ".join(page.locator("#results").inner_text().split())[:600]
            shown["finding"] = FINDING
            browser.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        shown["log"] = log.read_text()[-3000:]
        Path(out_path).write_text(json.dumps(shown))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
