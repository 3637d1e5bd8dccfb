"""Fault injection for the store: every SQLite connection opened in a block, to act on later."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sqlite3.dbapi2
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tracked_sqlite_connections() -> Iterator[list[sqlite3.Connection]]:
    """Connections SQLite opens inside the block (SQLAlchemy calls ``sqlite3.dbapi2.connect``)."""
    opened: list[sqlite3.Connection] = []
    real = sqlite3.dbapi2.connect

    def connect(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        connection = real(*args, **kwargs)
        opened.append(connection)
        return connection

    sqlite3.dbapi2.connect = sqlite3.connect = connect
    try:
        yield opened
    finally:
        sqlite3.dbapi2.connect = sqlite3.connect = real


def make_read_only(connections: list[sqlite3.Connection]) -> None:
    """From now on every write fails as on a read-only database (SQLITE_READONLY)."""
    for connection in list(connections):
        with contextlib.suppress(sqlite3.Error):
            connection.execute("PRAGMA query_only = ON")


def deny_inserts_into(connections: list[sqlite3.Connection], table: str) -> None:
    """INSERTs into ``table`` fail when prepared (an error raised with the row's values at hand)."""
    insert = sqlite3.SQLITE_INSERT

    def authorizer(action, name, *_):  # noqa: ANN001, ANN202
        return sqlite3.SQLITE_DENY if action == insert and name == table else sqlite3.SQLITE_OK

    for connection in list(connections):
        with contextlib.suppress(sqlite3.Error):
            connection.set_authorizer(authorizer)


def mount_tmpfs(folder: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``folder`` (root with CAP_SYS_ADMIN); False if not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True)  # fmt: skip
    return done.returncode == 0


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def free_bytes(folder: Path) -> int:
    info = os.statvfs(folder)
    return info.f_bavail * info.f_frsize
