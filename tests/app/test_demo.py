"""`chexretrieve demo` as `make demo` runs it (issue 34, item 3): it prints the page's address as
soon as the page answers (a first run: after the first part of the archive, the rest arriving
while the page is up), stores the embeddings of every anchor set the page uses itself, fits the
density, and its last line is the address, never advice to run another command. A second run
reuses everything. A real subprocess with the bundled phantom encoder on a small archive; the page
is fetched over HTTP."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from net_ports import free_port

REPO = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"page: (http://127\.0\.0\.1:\d+/)")
HANG_GUARD_S = 600

pytestmark = [pytest.mark.slow]


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - loopback
        assert response.status == 200
        return response.read().decode("utf-8", "replace")


def _run_demo(root: Path, port: int, on_address) -> list[str]:
    """Run the demo until its last line; ``on_address(url, lines so far)`` when it prints the
    address. Returns every line printed."""
    env = {
        **os.environ,
        "CHEXRETRIEVE_CACHE": str(root / "cache"),
        "CHEXRETRIEVE_AUDIT_LOG": str(root / "audit.jsonl"),
        "COLUMNS": "200",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(REPO),
    }
    env.pop("CHEXRETRIEVE_DB", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "chexretrieve", "demo", "--data-dir", str(root / "demo"),
         "--n-images", "120", "--first-page", "40", "--port", str(port)],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + HANG_GUARD_S
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1).rstrip()
            except queue.Empty:
                assert process.poll() is None, "\n".join(seen)
                continue
            seen.append(line)
            found = ADDRESS.search(line)
            if found:
                on_address(found.group(1), list(seen))
            if line.startswith("case lookup on"):
                return seen
        raise AssertionError("the demo never printed its last line:\n" + "\n".join(seen))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def test_the_demo_embeds_its_anchors_prints_its_address_and_finishes(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    opened = {}

    def page_is_up(address, lines):
        opened["page"] = _page(address)  # the page answers at the moment its address is printed
        opened["lines"] = lines
        opened["address"] = address

    first = _run_demo(tmp_path, port, page_is_up)
    text = "\n".join(first)
    assert opened["address"] == url and "chexretrieve" in opened["page"]
    before_page = "\n".join(opened["lines"])
    assert "40 of 120 phantoms so far" in before_page
    assert "ingested 120 of 120 phantoms" in text  # the rest arrived while the page was up
    after_page = text.split("page: ")[1]
    assert "ingested 120 of 120" in after_page
    # the archive index (features, calibrations, density) brought up to the whole archive last
    assert re.search(r"archive index: 121 images, \d+ feature entries", after_page)
    assert re.search(r"anchors: the \d+ anchor sets the page uses are stored", after_page)
    assert first[-1].startswith(f"case lookup on {url}")  # the address is the last line
    assert "anchors embed" not in text  # no step left to the newcomer
    assert "embedded │" not in text and "│     0 │" not in text  # no row of zeros
    from chexretrieve.store import open_store

    with open_store(f"sqlite:///{tmp_path / 'demo' / 'chexretrieve.sqlite'}") as store:
        assert store.count_images() == 121  # the phantoms and RG1

    port = free_port()
    second = _run_demo(tmp_path, port, lambda address, lines: _page(address))
    again = "\n".join(second)
    assert "reusing" in again and "generating" not in again
    assert re.search(r"anchor sets the page uses are stored for \S+ \(0 embedded now", again)
    # nothing new: the index of the first run is kept as it was (the same generation)
    generation = re.compile(r"archive index: 121 images, \d+ feature entries, generation (\d+)")
    assert generation.findall(again) == generation.findall(after_page)[-1:]
    assert second[-1].startswith(f"case lookup on http://127.0.0.1:{port}/")
