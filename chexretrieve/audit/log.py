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
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from chexretrieve.audit.config import AuditConfig

ACTIONS = ("search", "view", "export")
GENESIS = "0" * 64
_TAIL_STEP = 8192


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
    """Append audit records to ``path``; see the module docstring for the format."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        except OSError as exc:
            raise ValueError(
                f"cannot open the audit file {self.path}: {exc.strerror or exc}; choose a "
                f"writable file with AuditConfig.path or $CHEXRETRIEVE_AUDIT_LOG"
            ) from None
        self._lock = threading.Lock()

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
        """Append one record and return it. ``fields`` must be JSON-ready (or dataclasses)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown audit action {action!r}; use one of {', '.join(ACTIONS)}")
        try:
            return self._append(action, user, fields)
        except OSError as exc:  # fail closed: no audit record, no action
            raise ValueError(
                f"the audit trail {self.path} cannot be written ({exc.strerror or exc}); the "
                f"{action} is refused until it can (free disk space or fix the file's permissions)"
            ) from None

    def _append(self, action: str, user: str | None, fields: dict) -> dict:
        with self._lock, self._locked() as fd:
            last = _last_line(fd)
            seq = 1
            if last:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    seq = int(json.loads(last)["seq"]) + 1
            entry = {
                "seq": seq,
                "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                "user": user or current_user(),
                "action": action,
                **{k: _plain(v) for k, v in fields.items()},
                "prev": hashlib.sha256(last).hexdigest() if last else GENESIS,
            }
            line = json.dumps(entry, separators=(",", ":"), ensure_ascii=True, default=str)
            os.write(fd, (line + "\n").encode("ascii"))
            if self.fsync:
                os.fsync(fd)
        return entry

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

    def verify(self) -> list[str]:
        return verify_audit_file(self.path)


def verify_audit_file(path: str | os.PathLike[str]) -> list[str]:
    """Problems of an audit file (empty list: intact): broken hash chain, gaps in ``seq``,
    lines that are not JSON records."""
    problems = []
    previous: bytes | None = None
    expected_seq = 1
    for number, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
        try:
            entry = json.loads(line)
            prev, seq = entry["prev"], entry["seq"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"line {number}: not a JSON audit record")
            previous, expected_seq = line, expected_seq + 1
            continue
        wanted = hashlib.sha256(previous).hexdigest() if previous is not None else GENESIS
        if prev != wanted:
            problems.append(
                f"line {number}: hash chain broken (the line before was changed, "
                "removed or inserted)"
            )
        if seq != expected_seq:
            problems.append(f"line {number}: seq {seq}, expected {expected_seq}")
        previous, expected_seq = line, (seq if isinstance(seq, int) else expected_seq) + 1
    return problems


def open_audit_log(config: AuditConfig | None = None) -> AuditLog | None:
    """The audit log the configuration asks for (None when turned off)."""
    config = config or AuditConfig()
    if not config.enabled:
        return None
    return AuditLog(config.resolved_path, fsync=config.fsync)


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
