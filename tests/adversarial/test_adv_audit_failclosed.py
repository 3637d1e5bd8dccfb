"""Issue 23, finding 1: the audit trail fails closed on a full disk.

Short writes, writes that make no progress, ENOSPC, a failing fsync, a head record that cannot be
written and a roll-back that fails too are injected into ``os.write`` / ``os.fsync`` /
``os.ftruncate``; a real file-size limit (RLIMIT_FSIZE, which the kernel enforces with a short
write and then EFBIG) is hit by a second process. Every time: the action is refused with a clear
message, no cut record stays in the file, ``seq`` never restarts and the file verifies.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys

import pytest
from adv_support import REPO

from chexretrieve.audit import AuditLog, verify_audit_file
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.search.service import SearchRequest


def _trail(tmp_path, n=5):  # noqa: ANN001, ANN202
    audit = AuditLog(tmp_path / "trail.jsonl", key_path=tmp_path / "keys" / "audit.key")
    for i in range(n):
        audit.view("dr.a", i, f"1.2.{i}", what="details")
    return audit


def _seqs(audit) -> list[int]:  # noqa: ANN001
    return [e["seq"] for e in audit.entries()]


class _Faults:
    """os.write replacement: the first ``short`` calls on the audit file write half their bytes,
    the next ``fail`` calls raise ``error`` (or return 0 when ``error`` is None)."""

    def __init__(self, short: int, fail: int, error: int | None = errno.ENOSPC):
        self.short, self.fail, self.error = short, fail, error
        self.real = os.write

    def __call__(self, fd, data):  # noqa: ANN001, ANN204
        if self.short > 0:
            self.short -= 1
            return self.real(fd, bytes(data[: max(1, len(data) // 2)]))
        if self.fail > 0:
            self.fail -= 1
            if self.error is None:
                return 0
            raise OSError(self.error, os.strerror(self.error))
        return self.real(fd, data)


FAULTS = {
    "short write then ENOSPC": lambda: _Faults(short=1, fail=5),
    "ENOSPC at once": lambda: _Faults(short=0, fail=5),
    "write makes no progress": lambda: _Faults(short=0, fail=5, error=None),
    "short write then EIO": lambda: _Faults(short=1, fail=5, error=errno.EIO),
    "short write then EFBIG": lambda: _Faults(short=1, fail=5, error=errno.EFBIG),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failed_write_refuses_the_action_and_leaves_no_cut_record(
    tmp_path, monkeypatch, cases, fault
):
    audit = _trail(tmp_path)
    before = audit.path.read_bytes()
    monkeypatch.setattr(os, "write", FAULTS[fault]())
    refused = None
    try:
        audit.view("dr.b", 99, "1.2.99", what="details")
    except ValueError as exc:
        refused = str(exc)
    monkeypatch.undo()
    unchanged = audit.path.read_bytes() == before
    audit.view("dr.c", 100, "1.2.100", what="details")  # the disk has room again
    checks = {
        "refused with a message": refused is not None and "refused" in refused,
        "no cut record left": unchanged,
        "seq continues (never restarts)": _seqs(audit) == [1, 2, 3, 4, 5, 6],
        "file verifies": verify_audit_file(audit.path, audit.key_path) == [],
    }
    for name, ok in checks.items():
        cases.check(f"{fault}: {name}", ok, str(refused))
    assert all(checks.values()), checks


def test_many_short_writes_that_progress_write_the_whole_record(tmp_path, monkeypatch, cases):
    audit = _trail(tmp_path)
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:7])))
    audit.view("dr.b", 5, "1.2.5", what="details")
    monkeypatch.undo()
    ok = _seqs(audit) == [1, 2, 3, 4, 5, 6] and verify_audit_file(audit.path, audit.key_path) == []
    cases.check("7-byte writes: one whole record", ok)
    assert ok


@pytest.mark.parametrize("where", ["fsync of the record", "head record", "roll-back fails too"])
def test_fsync_and_head_failures_refuse_and_roll_back(tmp_path, monkeypatch, cases, where):
    audit = _trail(tmp_path)
    before = audit.path.read_bytes()
    real_fsync, real_write = os.fsync, os.write
    log_inode = os.stat(audit.path).st_ino

    def failing_fsync(fd):  # noqa: ANN001, ANN202
        if os.fstat(fd).st_ino == log_inode:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    def failing_head_write(fd, data):  # noqa: ANN001, ANN202
        if os.fstat(fd).st_ino != log_inode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    def half_then_fail(fd, data):  # noqa: ANN001, ANN202
        if os.fstat(fd).st_ino == log_inode and len(data) > 10:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    if where == "fsync of the record":
        monkeypatch.setattr(os, "fsync", failing_fsync)
    elif where == "head record":
        monkeypatch.setattr(os, "write", failing_head_write)
    else:
        monkeypatch.setattr(os, "write", half_then_fail)
        monkeypatch.setattr(os, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(ValueError, match="refused") as refused:
        audit.view("dr.b", 99, "1.2.99", what="details")
    monkeypatch.undo()
    left_cut = audit.path.read_bytes() != before
    audit.view("dr.c", 100, "1.2.100", what="details")
    checks = {
        "refused": "refused" in str(refused.value),
        "rolled back" if where != "roll-back fails too" else "cut record left (expected)": (
            not left_cut if where != "roll-back fails too" else left_cut
        ),
        "next writer: seq continues, file verifies": _seqs(audit) == [1, 2, 3, 4, 5, 6]
        and verify_audit_file(audit.path, audit.key_path) == [],
    }
    for name, ok in checks.items():
        cases.check(f"{where}: {name}", ok, audit.path.read_text()[-300:])
    assert all(checks.values()), checks


def test_a_real_file_size_limit_mid_trail(tmp_path, cases):
    """A second process appends until the kernel refuses (RLIMIT_FSIZE: a short write, then
    EFBIG); it must stop at the first refusal with every record whole."""
    key = tmp_path / "audit.key"
    path = tmp_path / "trail.jsonl"
    AuditLog(path, key_path=key).view("setup", 0, "1.2.0", what="details")
    limit = os.path.getsize(path) + 5_000
    script = (
        "import sys\n"
        "from chexretrieve.audit import AuditLog\n"
        "a = AuditLog(sys.argv[1], key_path=sys.argv[2])\n"
        "n = 0\n"
        "try:\n"
        "    while n < 1000:\n"
        "        a.view('dr.x', n, '1.2.3.' + str(n) * 3, what='details'); n += 1\n"
        "except ValueError as exc:\n"
        "    print('REFUSED', n, exc)\n"
    )

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = subprocess.run(
        [sys.executable, "-c", script, str(path), str(key)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )
    lines = path.read_bytes().split(b"\n")
    whole = lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    audit = AuditLog(path, key_path=key)
    audit.view("after", 1, "1.2.1", what="details")
    seqs = _seqs(audit)
    checks = {
        "the writer was refused": "REFUSED" in run.stdout and "refused" in run.stdout,
        "every record whole": whole,
        "seq continues after the limit": seqs == list(range(1, len(seqs) + 1)),
        "file verifies": verify_audit_file(path, key) == [],
    }
    for name, ok in checks.items():
        cases.check(f"RLIMIT_FSIZE: {name}", ok, run.stdout[-300:] + run.stderr[-300:])
    cases.figure("records written before the limit", len(seqs) - 2)
    assert all(checks.values()), (checks, run.stdout[-500:], run.stderr[-500:])


def test_a_search_whose_audit_record_fails_is_not_shown(tmp_path, monkeypatch, cases):
    """The service raises instead of returning results when the audit record cannot be written."""
    from ingest_fixtures import write_archive

    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.audit import AuditConfig
    from chexretrieve.ingest import IngestConfig, ingest_paths
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.store import open_store

    write_archive(tmp_path / "archive", 12, size=32)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    encoder = StandInEncoder(dim=32)
    ingest_paths([tmp_path / "archive"], store, encoder, IngestConfig(workers=0))
    config = AppConfig(
        store.config.url,
        search=SearchConfig(feature_cache_dir=tmp_path / "features"),
        audit=AuditConfig(path=tmp_path / "audit.jsonl", key_path=tmp_path / "audit.key"),
    )
    service = open_search_app(config, store=store, encoder=encoder).service
    case = int(service.gallery.image_ids[0])
    service.search(SearchRequest(finding="Edema", case_id=case, top_k=3), user="dr.a")
    monkeypatch.setattr(os, "write", _Faults(short=1, fail=9))
    with pytest.raises(ValueError, match="refused"):
        service.search(SearchRequest(finding="Edema", case_id=case, top_k=3), user="dr.a")
    monkeypatch.undo()
    ok = [e["seq"] for e in service.audit.entries()] == [1] and verify_audit_file(
        service.audit.path, service.audit.key_path
    ) == []
    cases.check("search refused, trail intact", ok)
    store.close()
    assert ok


@pytest.mark.parametrize("records_before", [0, 3])
def test_a_writer_killed_between_a_record_and_its_head(tmp_path, cases, records_before):
    """kill -9 after the line is on disk but before the head record is replaced: the next
    writer adopts that whole, correctly signed record and goes on (seq continues)."""
    key = tmp_path / "audit.key"
    path = tmp_path / "trail.jsonl"
    audit = AuditLog(path, key_path=key)
    for i in range(records_before):
        audit.view("dr.a", i, "1.2", what="details")
    script = (
        "import os, sys\n"
        "import chexretrieve.audit.log as log\n"
        "log.write_head = lambda *a, **k: os._exit(9)\n"
        "log.AuditLog(sys.argv[1], key_path=sys.argv[2]).view('dr.k', 7, '1.2.7', what='details')\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(path), str(key)], cwd=REPO, timeout=120
    )
    after_kill = len(path.read_bytes().splitlines())
    AuditLog(path, key_path=key).view("dr.b", 8, "1.2.8", what="details")
    seqs = _seqs(AuditLog(path, key_path=key))
    checks = {
        "the writer died with its record on disk": killed.returncode == 9
        and after_kill == records_before + 1,
        "the next writer continues": seqs == list(range(1, records_before + 3)),
        "file verifies": verify_audit_file(path, key) == [],
    }
    for name, ok in checks.items():
        cases.check(f"killed after {records_before} records: {name}", ok, str(seqs))
    assert all(checks.values()), checks
