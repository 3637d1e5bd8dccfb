"""An append-only, hash-chained JSON-lines audit trail.

One line per action: ``seq`` (1, 2, ...), ``time`` (UTC, ISO 8601), ``user``, ``action``
(``search``, ``view``, ``export``), what the action touched, and ``prev``: the SHA-256 of the
previous line (64 zeros for the first). Editing, removing or reordering a line breaks the chain,
which :func:`verify_audit_file` reports. Lines are appended with ``O_APPEND`` under an exclusive
``flock`` (several server processes may share one file) and a thread lock; the file is created
with mode 0600 because it names studies and users.

The audit file is the one place that records *who looked at which study*: study and image
identifiers and the query as typed are written here, nothing else (no names, no pixels). Application
output and logs stay free of patient data.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import getpass
import hashlib
import hmac
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from chexretrieve.audit.anchor import TrailWitness, signed_anchor, trail_id
from chexretrieve.audit.config import AuditConfig
from chexretrieve.audit.keys import (
    GENESIS,
    AuditIntegrityError,
    Head,
    default_key_path,
    head_path,
    keyed_line,
    load_or_create_key,
    mac_of,
    read_head,
    split_mac,
    write_fully,
    write_head,
)

ACTIONS = ("search", "view", "export")
#: what happens to sign-ins and sessions (issue 33; written by chexretrieve.ui.sign_in and the
#: `users` commands): ``user`` is the name as typed, with ``client`` (the address) and ``outcome``
SIGN_IN_ACTIONS = ("sign_in", "lockout", "sign_out", "session_revoked")
_TAIL_STEP = 8192
log = logging.getLogger("chexretrieve.audit")


def current_user() -> str:
    """``$CHEXRETRIEVE_USER``, else the operating-system login, else ``unknown``."""
    named = os.environ.get("CHEXRETRIEVE_USER", "").strip()
    if named:
        return named
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class AuditLog:
    """Append audit records to ``path``; see the module docstring for the format.

    ``key_path``: the HMAC key file (created with mode 0600 on first use; None =
    :func:`chexretrieve.audit.keys.default_key_path`). ``fsync``: flush every record and head
    record to disk before the action goes on (off only for benchmarks). ``anchor``: where the
    trail's length and last line are reported after each record (the store's
    :class:`~chexretrieve.audit.anchor.StoreWitness`), so an emptied or deleted trail is found
    out by ``audit verify --db``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = True,
        key_path: str | os.PathLike[str] | None = None,
        anchor: TrailWitness | None = None,
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        # where the trail's length is also recorded after each record (the store, see
        # chexretrieve.audit.anchor); None: the head record beside the file only
        self.anchor = anchor
        self._anchor_path = str(self.path.resolve())
        self._trail: tuple[int, int, str] | None = None  # (device, inode, trail id) of the file
        self.key_path = Path(key_path) if key_path is not None else default_key_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        except OSError as exc:
            raise ValueError(
                f"cannot open the audit file {self.path}: {exc.strerror or exc}; choose a "
                f"writable file with AuditConfig.path or $CHEXRETRIEVE_AUDIT_LOG"
            ) from None
        self._key = load_or_create_key(self.key_path)
        self._lock = threading.Lock()
        self._sign_new_trail()

    def _sign_new_trail(self) -> None:
        """Give a new, empty trail its head record (0 records) before the first record, so a
        crash between the first record and its head is caught up like any later one."""
        try:
            with self._lock, self._locked() as fd:
                if os.fstat(fd).st_size == 0 and not head_path(self.path).exists():
                    write_head(self.path, self._key, Head(0, 0, 0, GENESIS), self.fsync)
        except OSError as exc:
            raise ValueError(
                f"cannot write the audit head record beside {self.path}: {exc.strerror or exc}"
            ) from None

    # ------------------------------------------------------------------ writing
    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # closing releases the flock

    def record(self, action: str, user: str | None, **fields: Any) -> dict:
        """Append one record and return it. ``fields`` must be JSON-ready (or dataclasses).

        Fails closed: when the record cannot be written whole and flushed (a full disk, a short
        write, an fsync error, a damaged trail) nothing of it stays in the file and ValueError
        says the action is refused."""
        if action not in ACTIONS + SIGN_IN_ACTIONS:
            raise ValueError(
                f"unknown audit action {action!r}; use one of "
                f"{', '.join(ACTIONS + SIGN_IN_ACTIONS)}"
            )
        try:
            return self._append(action, user, fields)
        except AuditIntegrityError as exc:
            raise AuditIntegrityError(
                f"the audit trail {self.path} cannot be extended: {exc}; the {action} is refused "
                "(run `chexretrieve audit verify` and move the damaged file aside)"
            ) from None
        except OSError as exc:  # fail closed: no audit record, no action
            raise ValueError(
                f"the audit trail {self.path} cannot be written ({exc.strerror or exc}); the "
                f"{action} is refused until it can (free disk space or fix the file's permissions)"
            ) from None

    def _append(self, action: str, user: str | None, fields: dict) -> dict:
        with self._lock, self._locked() as fd:
            size, seq, lines, prev = self._position(fd)
            entry = {
                "seq": seq,
                "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                "user": user or current_user(),
                "action": action,
                **{k: _plain(v) for k, v in fields.items()},
                "prev": prev,
            }
            line = keyed_line(entry, self._key)
            try:
                write_fully(fd, line + b"\n")
                if self.fsync:
                    os.fsync(fd)
                head = Head(seq, lines + 1, size + len(line) + 1, hashlib.sha256(line).hexdigest())
                write_head(self.path, self._key, head, self.fsync)
            except BaseException:
                _roll_back(fd, size)
                raise
            if self.anchor is not None:  # still under the lock: anchors reach it in seq order
                self._report(fd, head, line)
        return entry

    def _report(self, fd: int, head: Head, line: bytes) -> None:
        """Hand the anchor of the trail as it now stands to ``self.anchor`` (never fails the
        record: a witness that cannot take it says so in the log)."""
        try:
            info = os.fstat(fd)
            if head.lines == 1:
                trail = trail_id(line)
            elif self._trail is not None and self._trail[:2] == (info.st_dev, info.st_ino):
                trail = self._trail[2]
            else:
                trail = trail_id(_first_line(fd))
            self._trail = (info.st_dev, info.st_ino, trail)
            row = signed_anchor(self._key, trail, self._anchor_path, head.seq, head.lines,
                                head.size, head.last)  # fmt: skip
            self.anchor.witness(row)
        except Exception as exc:  # noqa: BLE001 - the record is written; the anchor is extra
            log.warning("the audit anchor of %s was not handed over (%s)", self.path, exc)

    def _position(self, fd: int) -> tuple[int, int, int, str]:
        """(size, next seq, lines so far, prev hash) of the file, checked against its head
        record; AuditIntegrityError when they disagree in a way a failed write cannot explain."""
        size = os.fstat(fd).st_size
        head = read_head(self.path, self._key)
        if head is None:
            return self._position_without_head(fd, size)
        if size < head.size:
            raise AuditIntegrityError(
                f"the file holds {size} bytes but its head record names {head.size} (lines "
                "were removed from the end, or the file was emptied)"
            )
        if size > head.size:
            head = self._catch_up(fd, head, size)
            size = head.size
        last = _last_line(fd)
        if head.lines and hashlib.sha256(last).hexdigest() != head.last:
            raise AuditIntegrityError("its last line does not match its head record (edited)")
        return size, head.seq + 1, head.lines, head.last

    def _position_without_head(self, fd: int, size: int) -> tuple[int, int, int, str]:
        if size == 0:
            return 0, 1, 0, GENESIS
        data = os.pread(fd, size, 0)
        if not data.endswith(b"\n"):
            raise AuditIntegrityError("it ends in an incomplete record")
        rows = data.splitlines()
        last = rows[-1]
        if split_mac(last) is not None:
            raise AuditIntegrityError(
                f"its head record {head_path(self.path)} is missing (deleted or never copied)"
            )
        try:  # a trail written before records were keyed: continue its numbering
            seq = int(json.loads(last)["seq"]) + 1
        except (ValueError, TypeError, KeyError):
            raise AuditIntegrityError("its last line is not an audit record") from None
        return size, seq, len(rows), hashlib.sha256(last).hexdigest()

    def _catch_up(self, fd: int, head: Head, size: int) -> Head:
        """The file is longer than its head record says: whole keyed records that continue the
        chain (this process died between a record and its head) are adopted; an incomplete
        record left by a write whose roll-back failed is cut off; anything else is refused."""
        extra = os.pread(fd, size - head.size, head.size)
        rows = extra.split(b"\n")
        complete, tail = rows[:-1], rows[-1]
        seq, lines, prev = head.seq, head.lines, head.last
        offset = head.size
        for row in complete:
            entry = _parse_keyed(row, self._key)
            if entry is None or entry.get("prev") != prev or entry.get("seq") != seq + 1:
                raise AuditIntegrityError(
                    f"bytes after its head record (from offset {offset}) are not records "
                    "this trail wrote"
                )
            seq, lines, prev, offset = (
                seq + 1,
                lines + 1,
                hashlib.sha256(row).hexdigest(),
                (offset + len(row) + 1),
            )
        if tail:
            if complete:
                raise AuditIntegrityError(f"it ends in an incomplete record at offset {offset}")
            _roll_back(fd, head.size)  # the cut record of a failed write; never chained onto
            return head
        adopted = Head(seq, lines, offset, prev)
        write_head(self.path, self._key, adopted, self.fsync)
        return adopted

    def search(
        self,
        user: str | None,
        request: Any,
        result: Any,
        query_study: str | None = None,
        **extra: Any,
    ):
        """A search: the query as asked, and every result shown (image id and study UID);
        ``extra`` fields (JSON-ready) are recorded beside them (e.g. ``density``: the query's
        out-of-distribution flag and log-density)."""
        query: dict[str, Any] = {
            "finding": result.finding,
            "geometry": result.geometry,
            "anchor_set": result.anchor_set,
            "top_k": request.top_k,
        }
        if request.case_id is not None:
            query["case"] = int(request.case_id)
            if query_study:
                query["case_study"] = query_study
        else:
            source = (
                request.image_embedding if request.image_embedding is not None else request.image
            )
            query["upload_sha256"] = _array_digest(source)
        if request.text:
            query["text"] = request.text
        filters = {
            k: v for k, v in _plain(request.filters).items() if v not in (None, (), [], False)
        }
        if filters:
            query["filters"] = filters
        if request.relevant or request.not_relevant:
            query["feedback"] = {
                "relevant": list(request.relevant),
                "not_relevant": list(request.not_relevant),
            }
        shown = [
            {"image": int(hit.image_id), "study": _text(hit.metadata.get("study_uid"))}
            for hit in result.hits
        ]
        return self.record("search", user, query=query, results=shown, **extra)

    def view(self, user: str | None, image_id: int, study_uid: str | None, what: str) -> dict:
        """A study opened on screen: ``what`` says how (e.g. 'query', 'details')."""
        return self.record("view", user, image=int(image_id), study=_text(study_uid), what=what)

    def export(
        self,
        user: str | None,
        image_ids: Sequence[int],
        study_uids: Sequence[str | None],
        destination: str,
    ) -> dict:
        """Studies written out of the application (a file, a print, another system)."""
        items = [
            {"image": int(i), "study": _text(s)} for i, s in zip(image_ids, study_uids, strict=True)
        ]
        return self.record("export", user, items=items, destination=destination)

    # ------------------------------------------------------------------ reading
    def entries(self) -> list[dict]:
        """Every record, oldest first (ValueError naming the line if one is not JSON)."""
        out = []
        for number, line in enumerate(self.path.read_bytes().splitlines(), start=1):
            try:
                out.append(json.loads(line))
            except ValueError:
                raise ValueError(f"{self.path}:{number}: not a JSON audit record") from None
        return out


def open_audit_log(
    config: AuditConfig | None = None, anchor: TrailWitness | None = None
) -> AuditLog | None:
    """The audit log the configuration asks for (None when turned off); ``anchor``: where its
    length is also recorded (the store's StoreWitness, see chexretrieve.audit.anchor)."""
    config = config or AuditConfig()
    if not config.enabled:
        return None
    return AuditLog(
        config.resolved_path, fsync=config.fsync, key_path=config.resolved_key_path, anchor=anchor
    )


def _parse_keyed(line: bytes, key: bytes) -> dict | None:
    """The record of a keyed line whose HMAC matches, else None."""
    parts = split_mac(line)
    if parts is None or not hmac.compare_digest(parts[1], mac_of(key, parts[0])):
        return None
    try:
        entry = json.loads(parts[0])
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def _roll_back(fd: int, size: int) -> None:
    """Cut the file back to ``size`` bytes after a failed write (best effort: a cut record left
    behind is removed by the next writer, see ``AuditLog._catch_up``)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)
        os.fsync(fd)


def _first_line(fd: int) -> bytes:
    """The file's first line without its newline."""
    data, offset = b"", 0
    while True:
        block = os.pread(fd, _TAIL_STEP, offset)
        data += block
        cut = data.find(b"\n")
        if cut >= 0 or not block:
            return data[:cut] if cut >= 0 else data
        offset += len(block)


def _last_line(fd: int) -> bytes:
    """The file's last complete line without its newline (b'' for an empty file)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return b""
    end = size
    data = b""
    while end > 0:
        start = max(0, end - _TAIL_STEP)
        data = os.pread(fd, end - start, start) + data
        end = start
        body = data.rstrip(b"\n")
        cut = body.rfind(b"\n")
        if cut >= 0:
            return body[cut + 1 :]
    return data.rstrip(b"\n")


def _array_digest(array: Any) -> str | None:
    if array is None:
        return None
    import numpy as np

    values = np.ascontiguousarray(array)
    return hashlib.sha256(values.tobytes()).hexdigest()[:32]


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return str(value)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    return value
