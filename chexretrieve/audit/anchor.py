"""The audit trail's existence anchored outside its folder: the store remembers how long it was.

The head record (``chexretrieve.audit.keys``) catches lines cut from the end, but it lies beside
the file: deleting both, or emptying the file and deleting the head, left a trail that verified
("OK: 0 records"). So after every record the writer also hands the store it searches (any process,
any store a search opens; ``chexretrieve.store.audit_anchor``) an *anchor*: which trail (the
SHA-256 of its first line), where it is, its last ``seq``, line count and size, and the SHA-256 of
that last line, HMAC-signed under the audit key. A store row only moves forward, so several
processes appending to one trail (``serve --workers``, a CLI search beside a server) leave the
highest. ``chexretrieve audit verify --db URL`` then checks the file against every row of its path
and of its trail: a file that is missing, emptied, cut below what the store saw, or replaced by
another trail fails, saying what was lost. A trail knowingly archived or lost is marked with
``chexretrieve audit retire`` (who, when, why; signed), and is then only noted.

The store is written by a background thread (:class:`StoreWitness`) holding the newest anchor per
trail: a search never waits for the store's write lock (an ingest may hold it for seconds), and a
failed write (a read-only store) costs one warning and is retried with the next record. The
pending anchor is written at exit (``atexit``, and multiprocessing's finalizers in its worker
processes, which leave without atexit), so a one-shot ``chexretrieve search`` leaves it too.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import logging
import multiprocessing.util
import os
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Protocol

from chexretrieve.audit.keys import mac_of

logger = logging.getLogger("chexretrieve.audit")

#: what an anchor's HMAC covers, in this order
SIGNED_FIELDS = ("trail", "path", "seq", "lines", "size", "last", "retired")
#: seconds the exit waits for a pending anchor to reach the store
EXIT_WAIT_S = 30.0


class TrailWitness(Protocol):
    """Where an :class:`~chexretrieve.audit.AuditLog` reports its trail after each record."""

    def witness(self, row: dict) -> None:
        """Take a signed anchor row (never raises, never blocks on a database)."""
        ...


def trail_id(first_line: bytes) -> str:
    """Which trail a file holds: the SHA-256 of its first line (without the newline)."""
    return hashlib.sha256(first_line).hexdigest()


def _signed_bytes(row: Mapping) -> bytes:
    values = [str(row.get(name) or "") for name in SIGNED_FIELDS]
    return ("chexretrieve-audit-anchor|1|" + "|".join(values)).encode()


def signed_anchor(key: bytes, trail: str, path: str, seq: int, lines: int, size: int,
                  last: str) -> dict:  # fmt: skip
    """An anchor row for the store (``retired`` empty), HMAC-signed under the audit key."""
    row = {"trail": trail, "path": path, "seq": int(seq), "lines": int(lines),
           "size": int(size), "last": last, "retired": None}  # fmt: skip
    return {**row, "mac": mac_of(key, _signed_bytes(row))}


def retired_mac(key: bytes, row: Mapping, retired: str) -> str:
    """The signature of ``row`` once marked ``retired``."""
    return mac_of(key, _signed_bytes({**row, "retired": retired}))


def anchor_signed(key: bytes, row: Mapping) -> bool:
    """Whether a stored row carries the audit key's signature of its fields."""
    return hmac.compare_digest(str(row.get("mac") or ""), mac_of(key, _signed_bytes(row)))


def check_against_anchors(
    path_text: str, rows: list[bytes], anchors: Iterable[Mapping], key: bytes | None, store: str
) -> tuple[list[tuple[int | None, str]], list[str]]:
    """(problems as (line or None, text), notes) of a file's ``rows`` (its lines, without
    newlines) against the anchor rows a store holds for its path or its trail."""
    problems: list[tuple[int | None, str]] = []
    notes: list[str] = []
    here = trail_id(rows[0]) if rows else None
    accounted = "`chexretrieve audit retire` once it is accounted for"
    for row in anchors:
        seen = (
            f"{row['lines']} records up to seq {row['seq']}, first seen "
            f"{_when(row['first_seen'])}, last written {_when(row['updated_at'])}"
        )
        if key is None:
            notes.append(f"{store}'s anchor ({seen}) not checked: no audit key")
        elif not anchor_signed(key, row):
            text = f"{store}'s anchor of a trail at {row['path']} does not match its signature"
            problems.append((None, text + " (edited in the store)"))
        elif row["trail"] == here:
            lines = int(row["lines"])
            if len(rows) < lines:
                text = (
                    f"missing: {store} saw this trail hold {seen}; the file has {len(rows)} "
                    "lines (records were removed from its end)"
                )
                problems.append((len(rows) + 1, text))
            elif hashlib.sha256(rows[lines - 1]).hexdigest() != row["last"]:
                text = f"differs from the record {store} saw at seq {row['seq']} (edited)"
                problems.append((lines, text))
        elif row.get("retired"):
            notes.append(f"{store} saw a retired trail at {row['path']} ({seen}): {row['retired']}")
        elif row["path"] != path_text:
            continue  # another trail, elsewhere: not this file's business
        elif not rows:
            text = (
                f"the file is empty, but {store} saw an audit trail here of {seen}: it was "
                f"emptied or replaced ({accounted})"
            )
            problems.append((None, text))
        else:
            text = (
                f"{store} saw another audit trail at this path ({seen}) that this file does not "
                f"hold (its first record differs): it was replaced or restarted ({accounted})"
            )
            problems.append((None, text))
    return problems, notes


def missing_file_problems(path_text: str, anchors: Iterable[Mapping], store: str) -> list[str]:
    """What is lost when the file at ``path_text`` does not exist (live anchors of that path)."""
    lost = []
    for row in anchors:
        if row["path"] == path_text and not row.get("retired"):
            lost.append(
                f"the audit file is missing, but {store} saw a trail here of {row['lines']} "
                f"records up to seq {row['seq']} (first seen {_when(row['first_seen'])}, last "
                f"written {_when(row['updated_at'])}): it was deleted or moved"
            )
    return lost


def _when(value) -> str:  # noqa: ANN001
    return value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else str(value)


# ------------------------------------------------------------------------ the background writer
_LIVE: weakref.WeakSet = weakref.WeakSet()


class StoreWitness:
    """Writes the newest anchor of each trail to ``table`` (``write(row)``, e.g.
    ``chexretrieve.store.audit_anchor.AuditAnchorTable``) in a background thread."""

    def __init__(self, table, exit_wait_s: float = EXIT_WAIT_S) -> None:  # noqa: ANN001
        self.table = table
        self.exit_wait_s = exit_wait_s
        #: the last write failure ("" once a write succeeds)
        self.error = ""
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, dict] = {}
        self._fresh = False  # an anchor arrived since the thread last looked
        self._busy = False
        self._thread: threading.Thread | None = None

    def witness(self, row: dict) -> None:
        with self._cond:
            held = self._pending.get(row["trail"])
            if held is None or int(row["seq"]) > int(held["seq"]):
                self._pending[row["trail"]] = dict(row)
            self._fresh = True
            self._start()
            self._cond.notify_all()

    def _start(self) -> None:  # under self._cond
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="audit-anchor", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._fresh:
                    self._cond.wait()
                self._fresh = False
                rows = list(self._pending.values())
                self._pending.clear()
                self._busy = True
            failed = []
            for row in rows:
                try:
                    self.table.write(row)
                except Exception as exc:  # noqa: BLE001 - a store that cannot take it: say once
                    failed.append(row)
                    self._failed(f"{type(exc).__name__}: {exc}")
            with self._cond:
                for row in failed:  # retried with the next record, unless a newer one came
                    self._pending.setdefault(row["trail"], row)
                if not failed:
                    self.error = ""
                self._busy = False
                self._cond.notify_all()

    def _failed(self, error: str) -> None:
        if error != self.error:
            logger.warning(
                "the audit trail's anchor cannot be recorded in the store (%s); the trail is "
                "still written and signed, and the anchor is retried with the next record",
                error,
            )
        self.error = error

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every anchor handed over was tried; True when all reached the store."""
        with self._cond:
            if self._fresh:
                self._start()
            self._cond.wait_for(lambda: not self._fresh and not self._busy, timeout)
            return not self._pending and not self._fresh


def _flush_all() -> None:
    for witness in list(_LIVE):
        if witness._pending or witness._fresh or witness._busy:
            witness.flush(witness.exit_wait_s)


def _after_fork_in_child() -> None:
    for witness in list(_LIVE):  # the parent's thread and lock do not exist here
        pending = dict(witness._pending)
        witness._reset()
        witness._pending = pending
        witness._fresh = bool(pending)


def _flush_at_process_exit(_: object = None) -> None:
    """Flush at exit, also in a multiprocessing child (which leaves by ``os._exit``: no atexit
    there, but its finalizers run; the fork clears them, so they are registered again)."""
    multiprocessing.util.Finalize(None, _flush_all, exitpriority=10)


class _ForkHook:
    """A weak-referenceable owner of the after-fork registration."""


_FORK_HOOK = _ForkHook()
atexit.register(_flush_all)
_flush_at_process_exit()
multiprocessing.util.register_after_fork(_FORK_HOOK, _flush_at_process_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
