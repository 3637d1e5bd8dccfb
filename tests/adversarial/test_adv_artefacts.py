"""Issue 36, findings 1-3: a damaged or forged archive-density file never blocks a search nor
changes its answer, and a freshly started server's first searches, asked at once, all answer.

A phantom archive (the phantom encoder: its text tower loads transformers' MiniLM on the first
search, the import a server's warm-up thread raced) gets its density fitted once; then, for each
kind of damage an outsider who can write the cache folder (but not read the install's key) or a
faulty disk makes, the file is damaged and:

* ``chexretrieve density show`` (a fresh process) says so in one line (exit 2, no traceback, no
  bare "Aborted.");
* a fresh ``chexretrieve serve`` is started and three users open a case and search at once as
  soon as the page answers: every search answers with its results, saying "typicality
  unavailable: rebuilding" or giving the clean fit's percentile, never "unlike the archive" and
  never "could not finish"; a later search gives the clean fit's percentile (rebuilt);
* a fresh ``chexretrieve search --json`` answers with the clean fit's verdict (refitted during
  the call), saying the saved fit was damaged.

Since issue 31 the archive index keeps its own copy of the density (what searches read); each
damage is done to both copies.

The damaged files are made here with ``zipfile`` and ``numpy.save`` (not with the code under test).
Seven fresh servers, each searched by three users at once, are also the start-up race's test.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import adv_server as srv
import numpy as np
import pytest
from density_zip import npz_bytes, npz_members
from net_ports import free_port

REPO = Path(__file__).resolve().parents[2]
CASE = "5"
FINDING = "Pleural Effusion"
USERS = 3
HANG_GUARD_S = 600.0
UNLIKE = "this image is unlike the archive"
COULD_NOT = "could not finish"

KINDS = [
    "empty file",
    "truncated to half",
    "bad zip CRC",
    "NaN reference values",
    "empty reference values",
    "wrong-length reference values",
    "forged: threshold above every archive image",
]


def _make_world(root: Path, encoder: str, n: int) -> dict:
    """A phantom archive of ``n`` images ingested with ``encoder``, and the processes' env."""
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
    from chexretrieve.store import open_store

    archive = root / "phantom"
    write_archive(archive, ArchiveConfig(n=n, seed=3, workers=1), PhantomConfig(size=96))
    url = f"sqlite:///{root / 'archive.sqlite'}"
    env = {
        **os.environ,
        "COLUMNS": "200",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "CHEXRETRIEVE_TEST_ENCODERS": "1",
        "CHEXRETRIEVE_CACHE": str(root / "cache"),
        "HOME": str(root / "home"),
        "CHEXRETRIEVE_AUDIT_LOG": str(root / "audit.jsonl"),
        "GRADIO_TEMP_DIR": str(root / "gradio"),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    env.pop("CHEXRETRIEVE_DB", None)
    saved = os.environ.get("CHEXRETRIEVE_TEST_ENCODERS")
    os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = "1"
    try:
        store = open_store(url)
        ingest_paths([archive], store, load_encoder(encoder), IngestConfig(workers=0),
                     labels=read_label_csv(archive / "labels.csv"))  # fmt: skip
        store.close()
    finally:
        if saved is None:
            os.environ.pop("CHEXRETRIEVE_TEST_ENCODERS", None)
        else:
            os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = saved
    return {"root": root, "url": url, "env": env, "encoder": encoder}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 40-image archive (the stand-in encoder: cheap processes), its clean density file and
    the clean verdict of CASE."""
    world = _make_world(tmp_path_factory.mktemp("artefacts"), "stand-in", 40)
    fitted = _cli(world, "density", "fit", "--db", world["url"], "--encoder", world["encoder"])
    assert fitted.returncode == 0, fitted.stderr[-2000:]
    [path] = (world["root"] / "cache" / "density").glob("*/revision-*.npz")
    clean = _search_json(world)
    assert clean["density"]["available"] and not clean["density"]["ood"], clean["density"]
    # the archive index keeps its own copy of the density (issue 31), built by that search
    [indexed] = world["root"].glob("archive.index/*/density/density.*.npz")
    world.update(path=path, clean=path.read_bytes(), percentile=clean["density"]["percentile"],
                 index_clean=indexed.read_bytes())  # fmt: skip
    return world


def _cli(world, *args: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    return subprocess.run(
        [sys.executable, "-m", "chexretrieve", *args],
        cwd=world["root"], env=world["env"], capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _search_json(world) -> dict:  # noqa: ANN001
    run = _cli(world, "search", "--db", world["url"], "--encoder", world["encoder"], "--case",
               CASE, "--finding", FINDING, "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


# ------------------------------------------------------------------------------------- damage
def _damaged(kind: str, clean: bytes) -> bytes:
    """``clean`` damaged as ``kind`` says, by someone without the install's key."""
    if kind == "empty file":
        return b""
    if kind == "truncated to half":
        return clean[: len(clean) // 2]
    if kind == "bad zip CRC":
        data = bytearray(clean)
        data[clean.index(b"reference.npy") + 200] ^= 0xFF  # inside that member's stored bytes
        return bytes(data)
    members = npz_members(clean)
    reference = members["reference"]
    if kind == "NaN reference values":
        members["reference"] = np.full_like(reference, np.nan)
    elif kind == "empty reference values":
        members["reference"] = reference[:0]
    elif kind == "wrong-length reference values":
        members["reference"] = reference[:1]  # every query would sit at the 100th percentile
    elif kind == "forged: threshold above every archive image":
        meta = json.loads(bytes(members["meta"]).decode())
        meta["threshold"] = float(reference.max()) + 1000.0
        members["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    else:  # pragma: no cover
        raise AssertionError(kind)
    return npz_bytes(members)


def _put_damage(world, kind: str) -> None:  # noqa: ANN001
    shutil.rmtree(world["path"].parent / "set-aside", ignore_errors=True)
    for other in world["path"].parent.glob("revision-*.npz"):
        other.unlink()
    world["path"].write_bytes(_damaged(kind, world["clean"]))
    # the archive index's copy of the density (issue 31), what searches read: damaged the same way
    indexed = sorted(world["root"].glob("archive.index/*/density/density.*.npz"))
    assert indexed, "the archive index holds no density to damage"
    for path in indexed:
        path.write_bytes(_damaged(kind, world["index_clean"]))


# --------------------------------------------------------------------------------- the server
def _serve(world, port: int) -> subprocess.Popen:  # noqa: ANN001
    features = str(world["root"] / "features")
    command = [sys.executable, "-m", "chexretrieve", "serve", "--db", world["url"], "--encoder",
               world["encoder"], "--port", str(port), "--feature-cache", features]  # fmt: skip
    return subprocess.Popen(command, cwd=world["root"], env=world["env"], text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip


def _wait_for_page(base: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"serve exited {process.returncode}: {process.communicate()[1][-2000:]}")
        try:
            if srv.httpx.get(base + "config", timeout=5).status_code == 200:
                return
        except srv.httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the page did not answer within {HANG_GUARD_S} s")


def _open_and_search(base: str, tag: str) -> str:
    """One user: open CASE, search it; everything the two answers said, as text."""
    session = srv.client(base)
    try:
        state = f"s{tag}{time.monotonic_ns() % 10**9}"
        status, loaded = srv.call(session, *srv.opening(session, CASE, FINDING),
                                  session_hash=state, timeout=HANG_GUARD_S)  # fmt: skip
        index = srv.fn_index(session, "search", "click")
        data = srv.event_data(session, index, {"finding": FINDING})
        status2, searched = srv.call(session, index, data, session_hash=state,
                                     timeout=HANG_GUARD_S)  # fmt: skip
        text = html.unescape(srv.answer_text(loaded) + srv.answer_text(searched))
        return f"[{status} {status2}] {text}"
    finally:
        session.close()


def _at_once(base: str, tag: str, users: int = USERS) -> list[str]:
    """``users`` users open CASE and search at the same moment; what each was answered ("" for
    one still waiting after HANG_GUARD_S: a stream the server keeps alive with heartbeats never
    times out by itself, so the deadline is the whole call's)."""
    answers: list[str] = [""] * users
    barrier = threading.Barrier(users)

    def user(i: int) -> None:
        barrier.wait()
        answers[i] = _open_and_search(base, f"{tag}-{i}")

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(users)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + HANG_GUARD_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return list(answers)


def _stop(process: subprocess.Popen) -> str:
    """Terminate a server; its log."""
    process.terminate()
    try:
        return process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[1]


def _answered(text: str) -> bool:
    return text.startswith("[200 200]") and COULD_NOT not in text and "cx-card" in text


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_density_never_blocks_nor_changes_a_search(world, cases, kind):
    percentile = f"archive percentile {world['percentile']:.1f}"

    _put_damage(world, kind)
    show = _cli(world, "density", "show", "--db", world["url"], "--encoder", world["encoder"])
    show_lines = [line for line in show.stderr.splitlines() if line.strip()]
    shown = (show.returncode == 2 and len(show_lines) == 1 and "damaged" in show.stderr
             and "Traceback" not in show.stderr and "Aborted" not in show.stderr)  # fmt: skip
    cases.check(f"{kind}: density show: one line, exit 2", shown, show.stderr[-300:])

    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    process = _serve(world, port)
    answers: list[str] = [""] * USERS
    later = log = ""
    try:
        _wait_for_page(base, process)
        answers = _at_once(base, "first")
        deadline = time.monotonic() + HANG_GUARD_S
        while percentile not in later and time.monotonic() < deadline:
            [later] = _at_once(base, "later", users=1)
            time.sleep(0.5)
    finally:
        log = _stop(process)
    first = {
        "every first search answered with results": all(_answered(a) for a in answers),
        "each says rebuilding or gives the clean percentile": all(
            "typicality unavailable: rebuilding" in a or percentile in a for a in answers
        ),
        "none says unlike the archive": not any(UNLIKE in a for a in answers),
        "a later search gives the clean percentile (rebuilt)": percentile in later
        and UNLIKE not in later,
        "the server's log has no traceback": "Traceback" not in log,
        "the damaged file was set aside": any((world["path"].parent / "set-aside").glob("*")),
    }
    for check, ok in first.items():
        cases.check(f"{kind}: fresh serve: {check}", ok, " | ".join(a[:200] for a in answers))

    _put_damage(world, kind)
    run = _cli(world, "search", "--db", world["url"], "--encoder", world["encoder"], "--case",
               CASE, "--finding", FINDING, "--json")  # fmt: skip
    density = json.loads(run.stdout)["density"] if run.returncode == 0 else {}
    cli = {
        "exit 0, no traceback": run.returncode == 0 and "Traceback" not in run.stderr,
        "the clean verdict (refitted now)": density.get("available") is True
        and density.get("ood") is False
        and abs(density.get("percentile", -1) - world["percentile"]) < 1e-9,
        "it says the saved fit was damaged": "damaged" in density.get("note", ""),
    }
    for check, ok in cli.items():
        cases.check(f"{kind}: fresh CLI search: {check}", ok, run.stderr[-300:])
    failed = [c for c, ok in {"density show": shown, **first, **cli}.items() if not ok]
    assert not failed, (failed, show.stderr[-500:], answers, later[:500], log[-3000:],
                        run.stderr[-2000:])  # fmt: skip


# ------------------------------------------------------------------------------ start-up race
STARTS = 4


@pytest.fixture(scope="module")
def phantom_world(tmp_path_factory):
    """A 24-image archive of the phantom encoder, whose text tower loads MiniLM through
    transformers on a server's first searches (and in its warm-up thread, at the same time)."""
    return _make_world(tmp_path_factory.mktemp("race"), "phantom", 24)


def test_fresh_servers_answer_their_first_searches_at_once(phantom_world, cases):
    """Finding 3: ``serve`` started STARTS times; each time USERS users open a case and search
    the moment the page answers (its warm-up thread running): every search answers."""
    failures = 0
    for start in range(STARTS):
        port = free_port()
        base = f"http://127.0.0.1:{port}/"
        process = _serve(phantom_world, port)
        answers: list[str] = [""] * USERS
        try:
            _wait_for_page(base, process)
            answers = _at_once(base, str(start))
        finally:
            log = _stop(process)
        ok = all(_answered(a) for a in answers) and "cannot import name" not in log
        failures += not ok
        cases.check(f"start {start + 1}: {USERS} first searches at once all answered", ok,
                    " | ".join(a[:150] for a in answers) + log[-300:])  # fmt: skip
    assert failures == 0, f"{failures} of {STARTS} fresh servers failed a first search"
