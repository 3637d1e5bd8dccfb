"""Issue 36, finding 5: the audit trail's existence is anchored in the store, and several processes
appending to one trail (issue 31's ``serve --workers``, a CLI search beside a server) make one
valid chain and one anchor.

Before: emptying the audit file and deleting its ``.head`` passed ``audit verify`` ("OK: 0
records"). The tampering is done as someone who can write the audit folder (and, for the edited
anchor row, the store) but does not hold the audit key. ``audit verify`` is run as a command,
finding the store by ``--db`` and by ``$CHEXRETRIEVE_DB``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chexretrieve.audit import AuditLog, check_audit_file
from chexretrieve.audit.anchor import StoreWitness
from chexretrieve.store import open_store
from chexretrieve.store.audit_anchor import AuditAnchorTable

N = 30
WRITERS = 3
PER_WRITER = 120


@pytest.fixture
def world(tmp_path):
    """A migrated store, a key outside the audit folder, and a trail of N records anchored."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    open_store(url).close()
    key = tmp_path / "secret" / "audit.key"
    path = tmp_path / "audit" / "trail.jsonl"
    witness = StoreWitness(AuditAnchorTable(url))
    audit = AuditLog(path, key_path=key, anchor=witness)
    older = b""
    for i in range(N):
        audit.view("dr.alice", i, f"1.2.{i}", what="details")
        if i + 1 == 20:  # what someone who may read the folder copies at 20 records
            older = _head(path).read_bytes()
    assert witness.flush(60) and witness.error == ""
    return {"url": url, "key": key, "path": path, "witness": witness, "root": tmp_path,
            "head_at_20": older}  # fmt: skip


def _verify(world, *extra: str, env_db: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("CHEXRETRIEVE_DB", None)
    args = ["--log", str(world["path"]), "--key", str(world["key"]), *extra]
    if env_db:
        env["CHEXRETRIEVE_DB"] = world["url"]
    else:
        args += ["--db", world["url"]]
    return subprocess.run(
        [sys.executable, "-m", "chexretrieve", "audit", "verify", *args],
        cwd=world["root"], env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _head(path: Path) -> Path:
    return path.with_name(path.name + ".head")


def _rows(url: str) -> list[dict]:
    table = AuditAnchorTable(url)
    try:
        return table.rows()
    finally:
        table.close()


def _tamper(name: str, world) -> None:  # noqa: ANN001
    path = world["path"]
    if name == "file emptied, head deleted":
        path.write_bytes(b"")
        _head(path).unlink()
    elif name == "file and head deleted":
        path.unlink()
        _head(path).unlink()
    elif name == "last 10 records cut, the genuine head of then put back":
        path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:20]))
        _head(path).write_bytes(world["head_at_20"])
    elif name == "emptied, head deleted, then the server went on writing":
        path.write_bytes(b"")
        _head(path).unlink()
        audit = AuditLog(path, key_path=world["key"], anchor=world["witness"])
        for i in range(5):
            audit.view("dr.mallory", 100 + i, "1.9", what="details")
        assert world["witness"].flush(60)
    elif name == "the store's anchor row edited to seq 0":
        db = world["url"].removeprefix("sqlite:///")
        with sqlite3.connect(db) as connection:
            connection.execute("UPDATE audit_anchors SET seq = 0, lines = 0")
    else:  # pragma: no cover
        raise AssertionError(name)


#: tampering -> words the verify output must hold
TAMPERING = {
    "file emptied, head deleted": "the file is empty, but",
    "file and head deleted": "the audit file is missing, but",
    "last 10 records cut, the genuine head of then put back": "saw this trail hold 30 records",
    "emptied, head deleted, then the server went on writing": "another audit trail at this path",
    "the store's anchor row edited to seq 0": "does not match its signature",
}


@pytest.mark.parametrize("name", list(TAMPERING))
@pytest.mark.parametrize("how", ["--db", "$CHEXRETRIEVE_DB"])
def test_a_lost_trail_fails_verify_saying_what_was_lost(world, cases, name, how):
    intact = _verify(world, env_db=how != "--db")
    _tamper(name, world)
    run = _verify(world, env_db=how != "--db")
    said = run.stdout + run.stderr
    checks = {
        "intact before: OK, with the store's record": intact.returncode == 0
        and "store" in intact.stdout,
        "after: DAMAGED, exit 1": run.returncode == 1 and "DAMAGED" in run.stdout,
        "it says what was lost": TAMPERING[name] in said,
        "no traceback": "Traceback" not in said,
    }
    if name.startswith("last 10 records cut"):  # what an older backup copy looks like
        alone = _verify(world, "--no-store", env_db=how != "--db")
        checks["--no-store: the file alone verifies, with a note"] = (
            alone.returncode == 0 and "not checked against a store (--no-store)" in alone.stderr
        )
    for check, ok in checks.items():
        cases.check(f"{name} ({how}): {check}", ok, said[-300:])
    assert all(checks.values()), (checks, intact.stdout, said)


def test_a_retired_trail_is_noted_not_failed(world, cases):
    _tamper("emptied, head deleted, then the server went on writing", world)
    retire = subprocess.run(
        [sys.executable, "-m", "chexretrieve", "audit", "retire", "--log", str(world["path"]),
         "--key", str(world["key"]), "--db", world["url"], "--as", "it.officer",
         "--reason", "incident 42: trail restored to /archive"],
        cwd=world["root"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    run = _verify(world)
    checks = {
        "retire: one trail": retire.returncode == 0 and "1 trail(s)" in retire.stdout,
        "verify: OK": run.returncode == 0 and "OK" in run.stdout,
        "verify notes who retired it and why": "retired by it.officer" in run.stderr
        and "incident 42" in run.stderr,
    }
    for check, ok in checks.items():
        cases.check(check, ok, retire.stderr[-200:] + run.stderr[-200:])
    assert all(checks.values()), (checks, retire.stdout, retire.stderr, run.stdout, run.stderr)


def _append(path: str, key: str, url: str, start: str, tag: str, count: int) -> None:
    """One writer process: wait for the start file, then append ``count`` records."""
    witness = StoreWitness(AuditAnchorTable(url))
    audit = AuditLog(path, key_path=key, anchor=witness)
    while not os.path.exists(start):
        time.sleep(0.005)
    for i in range(count):
        audit.view(tag, i, f"1.2.{i}", what="details")
    witness.flush(60)


def _fork_then_append(path: str, key: str, url: str) -> None:
    """A server that opened its trail, then forked workers (the pre-fork model)."""
    witness = StoreWitness(AuditAnchorTable(url))
    audit = AuditLog(path, key_path=key, anchor=witness)
    audit.view("parent", 0, "1.2", what="details")
    witness.flush(60)
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_child_appends, args=(audit, j)) for j in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
        if child.exitcode != 0:
            raise SystemExit(f"a forked worker failed: {child.exitcode}")


def _child_appends(audit: AuditLog, j: int) -> None:
    for i in range(20):
        audit.view(f"worker{j}", i, "1.2", what="details")


def test_processes_appending_at_once_make_one_chain_and_one_anchor(tmp_path, cases):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    open_store(url).close()
    key, path, start = tmp_path / "k" / "audit.key", tmp_path / "a" / "trail.jsonl", tmp_path / "go"
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_append, args=(str(path), str(key), url, str(start), f"p{j}",
                                               PER_WRITER))
        for j in range(WRITERS)
    ]  # fmt: skip
    for writer in writers:
        writer.start()
    time.sleep(1.0)
    start.write_text("go")
    for writer in writers:
        writer.join(300)
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    rows = _rows(url)
    report = check_audit_file(path, key, rows, "the store")
    total = WRITERS * PER_WRITER
    users = {r["user"] for r in records}
    interleaved = len({records[i]["user"] for i in range(0, total, 7)}) > 1
    checks = {
        "every writer exited 0": all(w.exitcode == 0 for w in writers),
        f"{total} records, seq 1..{total} once each": [r["seq"] for r in records]
        == list(range(1, total + 1)),
        "the writers' records interleave": interleaved and users == {"p0", "p1", "p2"},
        "the chain, the head and the store's anchor verify": report.intact,
        f"one anchor row, at seq {total}": len(rows) == 1
        and rows[0]["seq"] == total
        and rows[0]["lines"] == total,
    }
    for check, ok in checks.items():
        cases.check(f"{WRITERS} processes: {check}", ok, str(report.problems[:2]))
    assert all(checks.values()), (checks, report.problems[:3], rows)

    forked_path = tmp_path / "b" / "trail.jsonl"
    forked = context.Process(target=_fork_then_append, args=(str(forked_path), str(key), url))
    forked.start()
    forked.join(300)
    rows = [r for r in _rows(url) if r["path"] == str(forked_path.resolve())]
    report = check_audit_file(forked_path, key, rows, "the store")
    ok = forked.exitcode == 0 and report.intact and [r["seq"] for r in rows] == [41]
    cases.check("forked workers: one chain of 41 records, anchored at 41", ok,
                f"{forked.exitcode} {report.problems[:2]} {rows}")  # fmt: skip
    assert ok, (forked.exitcode, report.problems, rows)
