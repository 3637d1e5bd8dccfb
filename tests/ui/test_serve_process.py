"""`serve --workers N` (worker processes forked after the imports) and what a serve process does
to stay small (chexretrieve.ui.serve_process): the real command on a small store, each worker's
page and an opened case searched through its event queue, the group stopped by SIGTERM, and one
worker's death stopping the rest with an error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from net_ports import free_ports
from ui_fakes import ingest_png_cases, wait_for

from chexretrieve.store import open_store
from chexretrieve.ui.config import MAX_WORKERS, UIConfig

REPO = Path(__file__).resolve().parents[2]
ENCODER = "stand-in:0:32"
HANG_GUARD_S = 180  # a hang guard only: every wait ends as soon as its condition holds
FINDING = "Pleural Effusion"


def _store(tmp_path: Path, n: int = 12) -> str:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    open_store(url).close()
    ingest_png_cases(url, tmp_path / "archive", n)
    return url


def _get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


def _wait_for(condition, what: str, process: subprocess.Popen):
    return wait_for(condition, what, HANG_GUARD_S, process)


def _open_case(base: str, config: dict, case: str) -> dict:
    """The page's "open case" event on the served app, through its queue as the page sends it:
    the completion message."""
    props = {c["id"]: c.get("props", {}) for c in config["components"]}
    button = next(i for i, p in props.items() if p.get("elem_id") == "load-case")
    dep = next(d for d in config["dependencies"] if [button, "click"] in d["targets"])
    given = {"case-id": case, "finding": FINDING}
    data = [given.get(props[i].get("elem_id"), props[i].get("value")) for i in dep["inputs"]]
    session = uuid.uuid4().hex[:11]
    body = {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None,
            "trigger_id": None}  # fmt: skip
    request = urllib.request.Request(
        f"{base}/gradio_api/queue/join", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    urllib.request.urlopen(request, timeout=30).read()
    stream = f"{base}/gradio_api/queue/data?session_hash={session}"
    with urllib.request.urlopen(stream, timeout=HANG_GUARD_S) as answer:
        for raw in answer:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    raise AssertionError("the event never completed")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _shared_dirty_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Shared_Dirty:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _serve(tmp_path: Path, url: str, port: int, workers: int) -> subprocess.Popen:
    env = {
        **os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1", "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path / "home"), "GRADIO_TEMP_DIR": str(tmp_path / "gradio"),
        "CHEXRETRIEVE_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "HF_HUB_OFFLINE": "1",
    }  # fmt: skip
    env.pop("CHEXRETRIEVE_DB", None)
    env.pop("MALLOC_ARENA_MAX", None)
    command = [
        sys.executable, "-m", "chexretrieve", "serve", "--db", url, "--encoder", ENCODER,
        "--port", str(port), "--workers", str(workers),
        "--feature-cache", str(tmp_path / "features"),
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc: Linux")
def test_two_workers_each_serve_and_search_and_sigterm_stops_both(tmp_path):
    url = _store(tmp_path)
    port = free_ports(2)
    process = _serve(tmp_path, url, port, 2)
    try:
        bases = [f"http://127.0.0.1:{p}" for p in (port, port + 1)]
        configs = [_wait_for(lambda b=b: _get_json(f"{b}/config"), f"page of {b}", process)
                   for b in bases]  # fmt: skip
        children = _children(process.pid)
        assert len(children) == 1, children  # the second worker, forked by the first
        # forked after the imports: the worker shares the imported modules' heap with the first
        assert _shared_dirty_mb(children[0]) > 10
        for base, config, case in zip(bases, configs, ("3", "7"), strict=True):
            message = _open_case(base, config, case)
            assert message.get("success"), message
            text = json.dumps(message["output"])
            assert "data:image/png;base64," in text  # the opened case's preview
            assert "cx-results" in text and f"query: case {case}" in text  # and its results
        actions = [json.loads(line)["action"]
                   for line in (tmp_path / "audit.jsonl").read_text().splitlines()]  # fmt: skip
        assert actions.count("search") == 2 and actions.count("view") >= 2
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=HANG_GUARD_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert f"2 workers on http://127.0.0.1:{port}, http://127.0.0.1:{port + 1}" in " ".join(
        err.split()
    )
    assert not Path(f"/proc/{children[0]}").exists() or "zombie" in Path(
        f"/proc/{children[0]}/status").read_text()  # fmt: skip


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc: Linux")
def test_a_worker_that_dies_stops_the_others_with_an_error(tmp_path):
    url = _store(tmp_path, n=6)
    port = free_ports(3)
    process = _serve(tmp_path, url, port, 3)
    try:
        for p in (port, port + 1, port + 2):
            _wait_for(lambda p=p: _get_json(f"http://127.0.0.1:{p}/config"), f"port {p}", process)
        children = sorted(_children(process.pid))
        assert len(children) == 2
        os.kill(children[0], signal.SIGKILL)
        _, err = process.communicate(timeout=HANG_GUARD_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    assert process.returncode == 1
    said = " ".join(err.split())
    assert f"the serve worker on port {port + 1} ended (exit code -9)" in said, err[-2000:]
    time.sleep(1)
    for p in (port, port + 1, port + 2):
        assert _get_json(f"http://127.0.0.1:{p}/config") is None  # every worker stopped


def test_workers_and_their_ports_are_checked():
    with pytest.raises(ValueError, match="workers must be between 1 and"):
        UIConfig(workers=0)
    with pytest.raises(ValueError, match="workers must be between 1 and"):
        UIConfig(workers=MAX_WORKERS + 1)
    with pytest.raises(ValueError, match="would pass port 65535"):
        UIConfig(port=65535, workers=2)
    assert UIConfig(port=65534, workers=2).workers == 2


def test_a_busy_port_of_a_later_worker_is_refused_before_anything_loads(tmp_path):
    port = free_ports(2)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port + 1))
        busy.listen()
        process = _serve(tmp_path, f"sqlite:///{tmp_path / 'none.sqlite'}", port, 2)
        _, err = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 2
    assert str(port + 1) in err and "error" in err


def _python(code: str, **env: str) -> str:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **env}
    if "MALLOC_ARENA_MAX" not in env:
        environment.pop("MALLOC_ARENA_MAX", None)
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                          text=True, timeout=HANG_GUARD_S, check=True)  # fmt: skip
    return done.stdout.strip()


def test_gradio_events_no_longer_import_matplotlib():
    """Gradio still wraps every event in its matplotlib backend switch (were that gone, the
    switch would not be found and this fails), and after skip_matplotlib_switch it imports
    nothing."""
    said = _python(
        "import sys\n"
        "from gradio import utils\n"
        "from chexretrieve.ui.serve_process import skip_matplotlib_switch\n"
        "found = skip_matplotlib_switch()\n"
        "with utils.MatplotlibBackendMananger():\n"
        "    pass\n"
        "print(found, 'matplotlib' in sys.modules)\n"
    )
    assert said == "True False"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_malloc_arenas_are_limited_unless_the_operator_chose():
    code = "from chexretrieve.ui.serve_process import limit_malloc_arenas as f; print(f())"
    assert _python(code) == "True"
    assert _python(code, MALLOC_ARENA_MAX="4") == "False"
