"""Checking an audit file (``chexretrieve audit verify``) and exporting its records
(``chexretrieve audit export``).

A file is intact when every line is a JSON record whose HMAC matches under the key, whose ``prev``
is the SHA-256 of the line before (64 zeros for the first), whose ``seq`` counts 1, 2, ... without
a gap, and when the signed head record names exactly its line count, size, last ``seq`` and last
line. Lines written before records were keyed carry no HMAC: they are checked by the unkeyed chain
only, and the report says so. Given the anchors a store holds (``chexretrieve.audit.anchor``), the
file must also still hold every record the store saw it hold: a missing, emptied, cut or replaced
trail fails, saying how many records up to which seq were lost.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import hmac
import io
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chexretrieve.audit.anchor import check_against_anchors, missing_file_problems
from chexretrieve.audit.keys import (
    GENESIS,
    AuditIntegrityError,
    default_key_path,
    head_path,
    mac_of,
    read_head,
    read_key,
    split_mac,
)


@dataclass
class AuditReport:
    """What :func:`check_audit_file` found."""

    path: Path
    lines: int = 0
    keyed: int = 0  # lines carrying an HMAC
    unkeyed: int = 0  # lines written before records were keyed
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_bad_line: int | None = None

    @property
    def intact(self) -> bool:
        return not self.problems

    def _problem(self, line: int | None, text: str) -> None:
        self.problems.append(f"line {line}: {text}" if line is not None else text)
        if line is not None and (self.first_bad_line is None or line < self.first_bad_line):
            self.first_bad_line = line


def check_audit_file(
    path: str | os.PathLike[str],
    key_path: str | os.PathLike[str] | None = None,
    anchors: Sequence[Mapping] | None = None,
    store: str = "the store",
) -> AuditReport:
    """Check ``path`` against the key in ``key_path`` (None: the default key file; it is never
    created here), its head record, and the ``anchors`` a store holds for its path or trail
    (chexretrieve.audit.anchor; None: not checked against a store); see the module docstring."""
    path = Path(path)
    report = AuditReport(path)
    key_file = Path(key_path) if key_path is not None else default_key_path()
    key: bytes | None = None
    key_trouble = ""
    try:
        key = read_key(key_file)
    except AuditIntegrityError as exc:
        key_trouble = str(exc)
    try:
        data = path.read_bytes()
    except OSError as exc:
        lost = missing_file_problems(str(path.resolve()), anchors or (), store)
        for text in lost or [f"cannot read {path}: {exc.strerror or exc}"]:
            report._problem(None, text)
        return report
    rows = data.split(b"\n")
    incomplete = rows.pop()  # b"" when the file ends with a newline
    report.lines = len(rows)
    previous: bytes | None = None
    expected_seq = 1
    last_seq = None
    for number, row in enumerate(rows, start=1):
        parts = split_mac(row)
        body = row
        if parts is not None:
            report.keyed += 1
            body = parts[0]
            if key is None:
                if report.keyed == 1:
                    report._problem(number, f"carries an HMAC but {key_trouble}; pass --key FILE")
            elif not hmac.compare_digest(parts[1], mac_of(key, body)):
                report._problem(
                    number, "HMAC does not match (the line was edited, or signed with another key)"
                )
        else:
            report.unkeyed += 1
            if report.keyed:
                report._problem(
                    number, "no HMAC after keyed lines (inserted or rewritten without the key)"
                )
        try:
            entry = json.loads(body)
            prev, seq = entry["prev"], entry["seq"]
        except (ValueError, KeyError, TypeError):
            report._problem(number, "not a JSON audit record")
            previous, expected_seq = row, expected_seq + 1
            continue
        wanted = hashlib.sha256(previous).hexdigest() if previous is not None else GENESIS
        if prev != wanted:
            report._problem(
                number, "hash chain broken (the line before was changed, removed or inserted)"
            )
        if seq != expected_seq:
            report._problem(number, f"seq {seq}, expected {expected_seq}")
        last_seq = seq
        previous, expected_seq = row, (seq if isinstance(seq, int) else expected_seq) + 1
    if incomplete:
        report._problem(report.lines + 1, "incomplete record (the file does not end in a newline)")
    _check_head(report, path, data, rows, last_seq, key, key_trouble)
    if anchors is not None:
        found, notes = check_against_anchors(str(path.resolve()), rows, anchors, key, store)
        for line, text in found:
            report._problem(line, text)
        report.notes.extend(notes)
    if report.unkeyed:
        report.notes.append(
            f"{report.unkeyed} of {report.lines} lines carry no HMAC (written before audit "
            "records were keyed): only their unkeyed SHA-256 chain is checked, which anyone able "
            "to write the file could recompute; archive this file and start a keyed one"
        )
    return report


def _check_head(report, path, data, rows, last_seq, key, key_trouble) -> None:  # noqa: ANN001
    if key is None:
        if head_path(path).exists() or report.keyed:
            if not report.keyed:
                report._problem(None, f"head record {head_path(path)} not checked: {key_trouble}")
        return
    try:
        head = read_head(path, key)
    except AuditIntegrityError as exc:
        report._problem(None, str(exc))
        return
    if head is None:
        if report.keyed:
            report._problem(
                None, f"the head record {head_path(path)} is missing (deleted or not copied)"
            )
        return
    if head.lines > report.lines or head.size > len(data):
        report._problem(
            report.lines + 1,
            f"missing: the head record names {head.lines} lines up to seq {head.seq}, the file "
            f"has {report.lines} (lines were removed from the end, or the file was emptied)",
        )
        return
    if head.lines < report.lines or head.size < len(data):
        report._problem(
            head.lines + 1,
            f"not in the head record (which names {head.lines} lines): appended after the last "
            "signed record, or the head record was replaced by an older one",
        )
        return
    if not rows:
        return
    if hashlib.sha256(rows[-1]).hexdigest() != head.last:
        report._problem(report.lines, "the last line does not match the head record (edited)")
    elif last_seq != head.seq:
        report._problem(report.lines, f"seq {last_seq}, the head record names {head.seq}")


def verify_audit_file(
    path: str | os.PathLike[str], key_path: str | os.PathLike[str] | None = None
) -> list[str]:
    """Problems of an audit file (empty list: intact); see :func:`check_audit_file`."""
    return check_audit_file(path, key_path).problems


# ---------------------------------------------------------------------------------- export
def parse_since(text: str) -> dt.datetime:
    """An ISO date or date-time (UTC when it names no zone); ValueError with an example."""
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r} is not an ISO date or time; e.g. 2026-12-01 or 2026-12-01T08:00"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def studies_of(entry: dict) -> list[str]:
    """Every study UID a record names (query case, results, viewed or exported items)."""
    found: list[str] = []

    def add(value) -> None:  # noqa: ANN001
        if isinstance(value, str) and value and value not in found:
            found.append(value)

    add(entry.get("study"))
    add((entry.get("query") or {}).get("case_study"))
    for group in ("results", "items"):
        for item in entry.get(group) or ():
            if isinstance(item, dict):
                add(item.get("study"))
    return found


def images_of(entry: dict) -> list[int]:
    found: list[int] = []
    candidates = [entry.get("image"), (entry.get("query") or {}).get("case")]
    for group in ("results", "items"):
        candidates += [i.get("image") for i in entry.get(group) or () if isinstance(i, dict)]
    for value in candidates:
        if isinstance(value, int) and value not in found:
            found.append(value)
    return found


def audit_records(path: Path) -> Iterator[dict]:
    """The records of an audit file, oldest first, without their HMACs (unparseable lines are
    skipped: ``verify`` reports them)."""
    for row in Path(path).read_bytes().splitlines():
        parts = split_mac(row)
        try:
            entry = json.loads(parts[0] if parts else row)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry


def select_records(
    records: Iterable[dict],
    user: str | None = None,
    study: str | None = None,
    since: dt.datetime | None = None,
    actions: Iterable[str] = (),
    outcome: str | None = None,
    client: str | None = None,
) -> list[dict]:
    """The records matching every filter given: ``user``, a ``study`` they name, at or after
    ``since``, of one of ``actions`` (e.g. sign_in, lockout), with this ``outcome`` (e.g. failed)
    or from this ``client`` address."""
    chosen = []
    actions = set(actions)
    for entry in records:
        if user is not None and entry.get("user") != user:
            continue
        if actions and entry.get("action") not in actions:
            continue
        if outcome is not None and entry.get("outcome") != outcome:
            continue
        if client is not None and entry.get("client") != client:
            continue
        if study is not None and study not in studies_of(entry):
            continue
        if since is not None:
            try:
                moment = dt.datetime.fromisoformat(str(entry.get("time")))
            except ValueError:
                continue
            if moment < since:
                continue
        chosen.append(entry)
    return chosen


CSV_COLUMNS = ("seq", "time", "user", "action", "studies", "images", "details")
_SAFE_CELL = re.compile(r"^[=+\-@\t\r]")


def records_as_csv(records: Iterable[dict]) -> str:
    """One row per record: seq, time, user, action, the studies and images it names (``;``
    separated) and the whole record as JSON. Cells a spreadsheet would run as a formula get a
    leading apostrophe."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for entry in records:
        cells = [
            entry.get("seq"),
            entry.get("time"),
            entry.get("user"),
            entry.get("action"),
            ";".join(studies_of(entry)),
            ";".join(str(i) for i in images_of(entry)),
            json.dumps(entry, separators=(",", ":"), default=str),
        ]
        writer.writerow(
            ["'" + c if isinstance(c, str) and _SAFE_CELL.match(c) else c for c in cells]
        )
    return out.getvalue()


def records_as_json_lines(records: Iterable[dict]) -> str:
    return "".join(json.dumps(e, separators=(",", ":"), default=str) + "\n" for e in records)
