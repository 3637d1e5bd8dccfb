"""`serve` on a store that holds no cases yet (issue 27): the container stack starts the UI
before its first ingest, so the UI must start, say on its page to run ingest, and open the case
lookup by itself once ingest has stored cases.

The first test runs the real command (`python -m chexretrieve serve`) as a process on an empty
SQLite store; the second drives ``wait_for_cases`` in this process and searches the app it built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from net_ports import free_port
from ui_fakes import ingest_png_cases, wait_for

from chexretrieve.store import open_store

pytestmark = [
    # gradio 6.31's queue uses pandas options that pandas 3 deprecates (not our code)
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]

REPO = Path(__file__).resolve().parents[2]
ENCODER = "stand-in:0:32"
WAITING_WORDS = "holds no cases of encoder"
HANG_GUARD_S = 120  # a hang guard only: every wait below ends as soon as its condition holds


def _empty_store(path: Path) -> str:
    url = f"sqlite:///{path}"
    open_store(url).close()  # the schema, no image: what a fresh database is after migrations
    return url


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def _wait_for(condition, what: str, process: subprocess.Popen | None = None):
    return wait_for(condition, what, HANG_GUARD_S, process)


def _page_config(base: str) -> str | None:
    """The served Gradio app's configuration (every component's text) as JSON text."""
    return _get(f"{base}/config")


def test_serve_on_an_empty_store_says_to_ingest_then_serves_the_new_cases(tmp_path):
    url = _empty_store(tmp_path / "store.sqlite")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
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
    command = [
        sys.executable, "-m", "chexretrieve", "serve", "--db", url, "--encoder", ENCODER,
        "--port", str(port), "--feature-cache", str(tmp_path / "features"),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        waiting = _wait_for(lambda: _page_config(base), "waiting page", process)
        assert WAITING_WORDS in waiting and "chexretrieve ingest" in waiting
        assert "docker compose run --rm ingest" in waiting
        assert "location.reload" in (_get(base + "/") or "")  # an open tab follows the swap
        assert "Phantom world" not in waiting  # the case lookup is not served yet

        ingest_png_cases(url, tmp_path / "archive")

        def lookup_served() -> str | None:
            config = _page_config(base)
            return config if config and WAITING_WORDS not in config else None

        served = _wait_for(lookup_served, "case lookup after ingest", process)
        assert "Phantom world" in served and "Filters" in served
        assert process.poll() is None  # still serving: it did not exit 2 as before
        assert "location.reload" not in (_get(base + "/") or "")
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "waiting for cases" in err and "serving the case lookup" in err


def test_the_app_built_after_the_wait_searches_the_ingested_cases(tmp_path, monkeypatch):
    from chexretrieve.app import ArchiveEmptyError
    from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
    from chexretrieve.ui.config import UIConfig
    from chexretrieve.ui.handlers import SearchSettings
    from chexretrieve.ui.waiting import wait_for_cases

    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    url = _empty_store(tmp_path / "store.sqlite")
    config = UIConfig(
        db_url=url, encoder=ENCODER, port=free_port(), feature_cache_dir=tmp_path / "f"
    )
    with pytest.raises(ArchiveEmptyError) as empty:
        open_case_lookup(config)
    built: dict = {}

    def build():
        built["lookup"], curation = open_case_lookup(config, empty.value.store, empty.value.encoder)
        return build_app(built["lookup"], curation, config)

    stop = threading.Event()
    result: dict = {}
    waiter = threading.Thread(
        target=lambda: result.update(
            app=wait_for_cases(config, empty.value.store, empty.value.encoder, build, launch_app,
                               poll_s=0.2, stop=stop)
        )
    )  # fmt: skip
    waiter.start()
    try:
        base = f"http://127.0.0.1:{config.port}"
        page = _wait_for(lambda: _page_config(base), "waiting page")
        assert WAITING_WORDS in page and "stand-in" in page
        assert not result  # still waiting: the store has no case
        ingest_png_cases(url, tmp_path / "archive", n=12)
        waiter.join(HANG_GUARD_S)
        assert not waiter.is_alive(), "wait_for_cases did not return after ingest"
    finally:
        stop.set()
        waiter.join(30)
    assert result["app"] is not None
    assert _get(f"{base}/config") is None  # the waiting page stopped; the port is free again

    lookup = built["lookup"]
    ids = sorted(lookup.service.gallery.image_ids.tolist())
    assert len(ids) == 12
    query = lookup.load_case(ids[0])
    hits = lookup.search(query, SearchSettings("Pleural Effusion", "cosine", top_k=5))
    assert len(hits.image_ids) == 5 and ids[0] not in hits.image_ids
    assert set(hits.image_ids) <= set(ids)
    assert json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])["action"] == "search"


def test_the_wait_survives_a_store_that_does_not_answer_for_a_while(capsys):
    from chexretrieve.ui.config import UIConfig
    from chexretrieve.ui.waiting import wait_for_cases

    class FlakyStore:
        """No answer twice (a database restarting), then no cases, then cases."""

        label = "postgresql+psycopg://chex:***@postgres:5432/chexretrieve"

        def __init__(self):
            self.answers = iter([OSError("server closed the connection"), OSError("refused"), 0, 3])

        def encoder(self, encoder_id):
            return object()

        def count_embeddings(self, encoder_id):
            answer = next(self.answers)
            if isinstance(answer, Exception):
                raise answer
            return answer

    class Encoder:
        encoder_id = "stand-in:0:32"

    launched = []
    app = wait_for_cases(
        UIConfig(encoder=ENCODER), FlakyStore(), Encoder(), lambda: "the case lookup",
        lambda page, config, block, head: launched.append((block, head)), poll_s=0.01,
    )  # fmt: skip
    assert app == "the case lookup"
    assert launched == [(False, launched[0][1])] and "location.reload" in launched[0][1]
    err = capsys.readouterr().err
    assert err.count("the store did not answer") == 2 and "serving the case lookup" in err
