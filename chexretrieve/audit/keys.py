"""The audit trail's secret key and its signed head record.

The key (32 random bytes, hex, in a file of mode 0600) is held *outside* the audit file: by
default ``$CHEXRETRIEVE_AUDIT_KEY``, else ``$XDG_CONFIG_HOME/chexretrieve/audit.key``. Every
record carries ``mac``, an HMAC-SHA256 under that key of the record's own bytes (which include
``prev``, the SHA-256 of the line before), so nobody without the key can edit a line and
recompute the chain.

The head record (``<audit file>.head``, replaced atomically after every record) names the last
``seq``, the number of lines, the file's size and the SHA-256 of the last line, HMAC-signed: lines
dropped from the end, an emptied file or an edited last line no longer match it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

#: environment variable naming the audit key file
AUDIT_KEY_ENV = "CHEXRETRIEVE_AUDIT_KEY"
HEAD_FORMAT = 1
#: ``prev`` of the first record
GENESIS = "0" * 64


class AuditIntegrityError(ValueError):
    """The audit trail, its head record or its key is damaged or missing; nothing is written."""


def default_key_path() -> Path:
    """``$CHEXRETRIEVE_AUDIT_KEY``, else ``$XDG_CONFIG_HOME/chexretrieve/audit.key``."""
    named = os.environ.get(AUDIT_KEY_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(config).expanduser() / "chexretrieve" / "audit.key"


def head_path(log_path: Path) -> Path:
    return log_path.with_name(log_path.name + ".head")


def read_key(path: Path) -> bytes:
    """The key in ``path``; AuditIntegrityError when it is missing, unreadable, malformed or
    readable by other users."""
    try:
        info = os.stat(path)
        text = Path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise AuditIntegrityError(f"no audit key at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AuditIntegrityError(f"cannot read the audit key {path}: {exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise AuditIntegrityError(f"the audit key {path} is not a regular file")
    if info.st_mode & 0o077:
        raise AuditIntegrityError(
            f"the audit key {path} is readable by other users (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {path}`"
        )
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 32:
        raise AuditIntegrityError(f"the audit key {path} is not 64 hexadecimal digits")
    return key


def load_or_create_key(path: Path) -> bytes:
    """The key in ``path``, created (mode 0600, 32 random bytes) when the file does not exist.

    Creation is atomic (a temporary file linked to the final name): two processes starting at
    once end up with the same key."""
    path = Path(path)
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write_fully(fd, (secrets.token_hex(32) + "\n").encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # fails when another process created it first: use theirs
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
            fsync_folder(path.parent)
        except OSError as exc:
            raise AuditIntegrityError(
                f"cannot create the audit key {path}: {exc.strerror or exc}; choose a writable "
                f"place with AuditConfig.key_path or ${AUDIT_KEY_ENV}"
            ) from None
    return read_key(path)


def mac_of(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def write_fully(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written; OSError(ENOSPC) when the disk takes none."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            import errno

            raise OSError(errno.ENOSPC, "no space left on device (a write made no progress)")
        view = view[written:]


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (ignored where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Head:
    """The signed summary of an audit file: its last ``seq``, line count, size, last line hash."""

    seq: int
    lines: int
    size: int
    last: str

    def _signed_bytes(self, log_name: str) -> bytes:
        text = f"chexretrieve-audit-head|{HEAD_FORMAT}|{log_name}|{self.seq}|{self.lines}|"
        return f"{text}{self.size}|{self.last}".encode()

    def to_json(self, key: bytes, log_name: str) -> bytes:
        record = {
            "format": HEAD_FORMAT,
            "log": log_name,
            "seq": self.seq,
            "lines": self.lines,
            "size": self.size,
            "last": self.last,
            "mac": mac_of(key, self._signed_bytes(log_name)),
        }
        return (json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")


def read_head(log_path: Path, key: bytes) -> Head | None:
    """The head record of ``log_path`` (None when there is none); AuditIntegrityError when it is
    not a head record or its signature does not match (forged, edited or another key's)."""
    path = head_path(log_path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditIntegrityError(f"cannot read the audit head record {path}: {exc}") from None
    try:
        record = json.loads(raw)
        head = Head(int(record["seq"]), int(record["lines"]), int(record["size"]), record["last"])
        mac = str(record["mac"])
        name = str(record["log"])
    except (ValueError, KeyError, TypeError):
        raise AuditIntegrityError(f"the audit head record {path} is not a head record") from None
    if name != log_path.name or not hmac.compare_digest(mac, mac_of(key, head._signed_bytes(name))):
        raise AuditIntegrityError(
            f"the audit head record {path} does not match its signature (edited, copied from "
            "another audit file, or signed with another key)"
        )
    return head


def write_head(log_path: Path, key: bytes, head: Head, fsync: bool = True) -> None:
    """Replace the head record atomically (temporary file, fsync, rename)."""
    path = head_path(log_path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            write_fully(fd, head.to_json(key, log_path.name))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # the folder is not fsync'ed: a rename lost in a power cut leaves the previous head, one
    # record behind the (fsync'ed) file, and the next writer catches up on that whole, signed
    # record (AuditLog._catch_up)


_MAC_TAIL = re.compile(rb',"mac":"([0-9a-f]{64})"}$')


def keyed_line(entry: dict, key: bytes) -> bytes:
    """The record as one ASCII JSON line ending in ``"mac"``: the HMAC of the line without it."""
    body = json.dumps(entry, separators=(",", ":"), ensure_ascii=True, default=str).encode()
    return body[:-1] + b',"mac":"' + mac_of(key, body).encode() + b'"}'


def split_mac(line: bytes) -> tuple[bytes, str] | None:
    """(the bytes the HMAC covers, the HMAC) of a keyed line; None for a line without one."""
    found = _MAC_TAIL.search(line)
    if found is None:
        return None
    return line[: found.start()] + b"}", found.group(1).decode()
