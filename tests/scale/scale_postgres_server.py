"""A throw-away PostgreSQL 15 server for tests: initdb into a temporary folder, loopback only.

The Debian binaries live in /usr/lib/postgresql/15/bin. initdb refuses to run as root, so as root
the server runs as the ``postgres`` user (``runuser``); the data folder's parent must then be
readable by that user, which is why the folder is made with ``tempfile.mkdtemp`` and opened up
(pytest's own tmp folders are private to root).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from net_ports import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PostgresServer:
    """initdb + pg_ctl start on 127.0.0.1:<free port>; ``url(db)`` for SQLAlchemy; ``stop()``."""

    def __init__(self, bin_dir: Path = PG_BIN) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="chexretrieve-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self._names = itertools.count(1)
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            os.chmod(self.root, 0o755)
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as_user, *args], check=True, capture_output=True, text=True, timeout=60
        )

    def start(self) -> PostgresServer:
        try:
            self._run(
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            )
            options = (
                f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-o",
                options,
                "start",
            )
        except subprocess.CalledProcessError as exc:
            log = self.log.read_text() if self.log.exists() else ""
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start: {exc.stderr}\n{log}") from None
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"test_{next(self._names)}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [*self._as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.data)]
                + ["-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)
