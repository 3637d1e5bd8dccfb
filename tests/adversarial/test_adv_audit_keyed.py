"""Issue 23, finding 4: audit tampering is found (edited last line, dropped last lines, an
emptied file, a line edited and every later hash recomputed, a chain re-signed with another key, a
deleted or swapped head record), and ``chexretrieve audit verify`` / ``export`` work from the
command line.

The tampering is done as an attacker who can write the audit folder but does not hold the key:
with plain file operations and a SHA-256 chain recomputed by this test's own code.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from adv_support import REPO

from chexretrieve.audit import AuditLog, check_audit_file

N = 30


@pytest.fixture
def trail(tmp_path):
    key = tmp_path / "secret" / "audit.key"
    audit = AuditLog(tmp_path / "orig" / "trail.jsonl", key_path=key)
    for i in range(N):
        user = "dr.alice" if i % 3 else "dr.bob"
        audit.view(user, i, f"1.2.840.{i % 5}", what="details")
    return audit


def _copy(audit, folder: Path) -> Path:  # noqa: ANN001
    """The trail and its head record copied into ``folder`` (the same file names)."""
    folder.mkdir()
    for source in (audit.path, audit.path.with_name(audit.path.name + ".head")):
        shutil.copy2(source, folder / source.name)
    return folder / audit.path.name


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _rechain(lines: list[bytes], start: int, sign_with: bytes | None = None) -> list[bytes]:
    """Recompute every ``prev`` from line ``start`` on, as an attacker would (this test's own
    SHA-256 chain); ``sign_with``: also re-sign each line under the attacker's own key."""
    out = list(lines)
    for i in range(start, len(out)):
        record = json.loads(out[i])
        record.pop("mac", None)
        record["prev"] = hashlib.sha256(out[i - 1]).hexdigest() if i else "0" * 64
        body = json.dumps(record, separators=(",", ":")).encode()
        if sign_with is not None:
            mac = hmac.new(sign_with, body, hashlib.sha256).hexdigest()
            body = body[:-1] + f',"mac":"{mac}"}}'.encode()
        out[i] = body
    return out


def _tamper(name: str, path: Path) -> None:
    lines = _lines(path)
    if name == "edited last line":
        lines[-1] = lines[-1].replace(b'"dr.alice"', b'"dr.eve"').replace(b'"dr.bob"', b'"dr.eve"')
        _write(path, lines)
    elif name == "last 3 lines dropped":
        _write(path, lines[:-3])
    elif name == "last line dropped":
        _write(path, lines[:-1])
    elif name == "file emptied":
        path.write_bytes(b"")
    elif name == "line 10 edited, later hashes recomputed":
        lines[9] = lines[9].replace(b'"image":9', b'"image":777')
        _write(path, _rechain(lines, 10))
    elif name == "whole chain re-signed with another key":
        lines[4] = lines[4].replace(b'"what":"details"', b'"what":"nothing"')
        _write(path, _rechain(lines, 0, sign_with=os.urandom(32)))
    elif name == "line 10 removed, head deleted":
        _write(path, lines[:9] + lines[10:])
        path.with_name(path.name + ".head").unlink()
    elif name == "lines dropped, head deleted":
        _write(path, lines[:-5])
        path.with_name(path.name + ".head").unlink()
    elif name == "head record edited to match":
        _write(path, lines[:-2])
        head_file = path.with_name(path.name + ".head")
        head = json.loads(head_file.read_text())
        head.update(lines=N - 2, seq=N - 2, size=path.stat().st_size)
        head["last"] = hashlib.sha256(lines[-3]).hexdigest()
        head_file.write_text(json.dumps(head))
    elif name == "line inserted without a key":
        record = json.loads(lines[5])
        record.pop("mac")
        lines.insert(6, json.dumps(record, separators=(",", ":")).encode())
        _write(path, lines)
    else:  # pragma: no cover
        raise AssertionError(name)


#: tampering -> the first line verify must name (None: a problem without a line is enough)
TAMPERING = {
    "edited last line": N,
    "last 3 lines dropped": N - 2,
    "last line dropped": N,
    "file emptied": 1,
    "line 10 edited, later hashes recomputed": 10,
    "whole chain re-signed with another key": 1,
    "line 10 removed, head deleted": 10,
    "lines dropped, head deleted": None,
    "head record edited to match": None,
    "line inserted without a key": 7,
}


@pytest.mark.parametrize("name", list(TAMPERING))
def test_tampering_is_found_and_the_first_bad_line_named(trail, tmp_path, cases, name):
    path = _copy(trail, tmp_path / "copy")
    intact = check_audit_file(path, trail.key_path)
    _tamper(name, path)
    report = check_audit_file(path, trail.key_path)
    wanted = TAMPERING[name]
    found = not report.intact and (wanted is None or report.first_bad_line == wanted)
    ok = intact.intact and intact.keyed == N and found
    cases.check(name, ok, f"first bad line {report.first_bad_line}: {report.problems[:3]}")
    assert ok, (intact.problems, report.first_bad_line, report.problems)


def test_the_key_lives_outside_the_log_with_mode_0600(trail, cases):
    key = trail.key_path
    text = trail.path.read_text() + trail.path.with_name(trail.path.name + ".head").read_text()
    checks = {
        "key file mode 0600": (key.stat().st_mode & 0o777) == 0o600,
        "key not in the audit folder": key.parent != trail.path.parent,
        "key never written into the trail": key.read_text().strip() not in text,
    }
    key.chmod(0o644)
    try:
        AuditLog(trail.path, key_path=key)
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    key.chmod(0o600)
    checks["a key readable by others is refused"] = "chmod 600" in refused
    for name, ok in checks.items():
        cases.check(name, ok, refused)
    assert all(checks.values()), checks


def test_a_writer_refuses_to_extend_a_truncated_trail(trail, tmp_path, cases):
    """A server must not paper over a truncation by signing a new head for the shorter file."""
    path = _copy(trail, tmp_path / "copy")
    _tamper("last 3 lines dropped", path)
    try:
        AuditLog(path, key_path=trail.key_path).view("dr.a", 1, "1.2", what="details")
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    still_found = not check_audit_file(path, trail.key_path).intact
    ok = "refused" in refused and "audit verify" in refused and still_found
    cases.check("truncated trail: writer refuses, truncation stays visible", ok, refused)
    assert ok


def _cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "chexretrieve", "audit", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _legacy_trail(path: Path, n: int = 4) -> None:
    """A trail as the unkeyed writer of before wrote it (SHA-256 chain, no HMAC, no head)."""
    lines: list[bytes] = []
    for i in range(n):
        record = {"seq": i + 1, "time": "2026-01-01T00:00:00.000+00:00", "user": "old"}
        record.update(action="view", image=i, study="1.2", what="details")
        record["prev"] = hashlib.sha256(lines[-1]).hexdigest() if lines else "0" * 64
        lines.append(json.dumps(record, separators=(",", ":")).encode())
    _write(path, lines)


def test_verify_command(trail, tmp_path, cases):
    key = str(trail.key_path)
    good = _cli("verify", "--log", str(trail.path), "--key", key)
    bad_path = _copy(trail, tmp_path / "bad")
    _tamper("line 10 edited, later hashes recomputed", bad_path)
    bad = _cli("verify", "--log", str(bad_path), "--key", key)
    legacy_path = tmp_path / "legacy.jsonl"
    _legacy_trail(legacy_path)
    legacy = _cli("verify", "--log", str(legacy_path), "--key", key)
    # a keyed writer continues an old trail: numbering and chain go on, the old lines stay unkeyed
    AuditLog(legacy_path, key_path=trail.key_path).view("new", 9, "1.2", what="details")
    continued = _cli("verify", "--log", str(legacy_path), "--key", key)
    no_key = _cli("verify", "--log", str(trail.path), "--key", str(tmp_path / "absent.key"))
    checks = {
        "intact: exit 0, OK": good.returncode == 0 and good.stdout.startswith("OK"),
        "tampered: exit 1, first bad line named": bad.returncode == 1
        and "first bad line: 10" in bad.stdout
        and "line 10: HMAC does not match" in bad.stderr,
        "unkeyed trail: exit 3, says so": legacy.returncode == 3
        and "carry no HMAC" in legacy.stdout + legacy.stderr,
        "continued unkeyed trail: seq 5, chain intact, still says so": continued.returncode == 3
        and json.loads(_lines(legacy_path)[-1])["seq"] == 5,
        "no key: refused, says which": no_key.returncode == 1 and "no audit key" in no_key.stderr,
    }
    for name, ok in checks.items():
        cases.check(f"verify: {name}", ok, (good.stdout + bad.stdout + bad.stderr)[-300:])
    assert all(checks.values()), (checks, good, bad, legacy, no_key)


def test_export_command(trail, tmp_path, cases):
    key = str(trail.key_path)
    log = str(trail.path)
    everything = [json.loads(line) for line in _lines(trail.path)]
    bad_path = _copy(trail, tmp_path / "bad")
    _tamper("edited last line", bad_path)
    since = everything[20]["time"]
    by_user = _cli("export", "--log", log, "--key", key, "--user", "dr.bob", "--as", "officer")
    by_study = _cli("export", "--log", log, "--key", key, "--study", "1.2.840.3", "--as", "o")
    out = tmp_path / "since.csv"
    before = [json.loads(line) for line in _lines(trail.path)]
    wanted_since = [e["seq"] for e in before if e["time"] >= since]
    by_time = _cli("export", "--log", log, "--key", key, "--since", since, "--format", "csv",
                   "-o", str(out), "--as", "officer")  # fmt: skip
    damaged = _cli("export", "--log", str(bad_path), "--key", key)
    bob = [json.loads(line) for line in by_user.stdout.splitlines()]
    study = [json.loads(line) for line in by_study.stdout.splitlines()]
    rows = list(csv.DictReader(io.StringIO(out.read_text()))) if out.exists() else []
    trail_after = [json.loads(line) for line in _lines(trail.path)]
    exports = [e for e in trail_after if e["action"] == "export"]
    checks = {
        "--user: exactly that user's records": by_user.returncode == 0
        and [e["seq"] for e in bob] == [e["seq"] for e in everything if e["user"] == "dr.bob"],
        "--study": [e["seq"] for e in study]
        == [e["seq"] for e in everything if e["study"] == "1.2.840.3"],
        "--since, CSV": by_time.returncode == 0
        and [int(r["seq"]) for r in rows] == wanted_since
        and 21 in wanted_since
        and all(r["studies"] for r in rows if r["action"] == "view"),
        "exported records carry no HMAC": all("mac" not in e for e in bob),
        "a damaged file is not exported": damaged.returncode == 1 and damaged.stdout == "",
        "each export is audited": len(exports) == 3
        and exports[0]["user"] == "officer"
        and exports[0]["records"] == len(bob),
        "trail still verifies": check_audit_file(trail.path, trail.key_path).intact,
    }
    for name, ok in checks.items():
        cases.check(f"export: {name}", ok, by_user.stderr[-300:] + by_time.stderr[-300:])
    assert all(checks.values()), (checks, by_user.stderr, by_time.stderr, damaged.stderr)


def test_an_old_trail_ending_in_a_cut_record_is_not_continued(tmp_path, cases):
    """What the full-disk bug left behind: the writer refuses it rather than chain onto it."""
    path = tmp_path / "old.jsonl"
    _legacy_trail(path, n=3)
    path.write_bytes(path.read_bytes()[:-20])  # the last record cut, no newline
    before = path.read_bytes()
    try:
        AuditLog(path, key_path=tmp_path / "k.key").view("dr.a", 1, "1.2", what="details")
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    report = check_audit_file(path, tmp_path / "k.key")
    ok = (
        "incomplete record" in refused
        and "refused" in refused
        and path.read_bytes() == before
        and report.first_bad_line == 3
    )
    cases.check("an old trail with a cut last record: refused, untouched, named", ok, refused)
    assert ok, (refused, report.problems)
