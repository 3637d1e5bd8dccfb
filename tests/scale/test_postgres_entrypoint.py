"""docker/postgres-entrypoint.sh, the PostgreSQL stand-in image's entry point, run on this host's
Debian postgresql-15 (the binaries the image installs): it must honour POSTGRES_USER,
POSTGRES_PASSWORD and POSTGRES_DB as postgres:15-bookworm does, create a UTF8 database, demand the
password over TCP, refuse to start without one, and keep an existing data folder on restart.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from net_ports import free_port
from scale_helpers import require_binary

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "docker" / "postgres-entrypoint.sh"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
HANG_GUARD_S = 60


@pytest.fixture
def data_root():
    """A folder the postgres user may write (pytest's tmp folders are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="chexretrieve-pg-entry-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chmod(root, 0o755)
        os.chown(root, owner.pw_uid, owner.pw_gid)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _start(root: Path, env: dict[str, str], port: int) -> subprocess.Popen:
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    environment = {
        "PATH": f"{PG_BIN}:/usr/bin:/bin",
        "PGDATA": str(root / "data"),
        "LANG": "C.UTF-8",
        "TMPDIR": str(root),
        **env,
    }
    server_args = ["-p", str(port), "-c", "listen_addresses=127.0.0.1", "-k", str(root)]
    return subprocess.Popen(
        [*as_user, "env", "-i", *(f"{k}={v}" for k, v in environment.items()),
         "sh", str(ENTRYPOINT), "postgres", *server_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _connect(port: int, user: str, password: str, db: str):
    import psycopg

    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        try:
            return psycopg.connect(
                host="127.0.0.1", port=port, user=user, password=password, dbname=db,
                connect_timeout=5,
            )  # fmt: skip
        except psycopg.OperationalError as exc:
            if "password authentication failed" in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _stop(server: subprocess.Popen) -> str:
    server.terminate()
    out, _ = server.communicate(timeout=HANG_GUARD_S)
    return out


def test_the_stand_in_honours_the_postgres_variables_and_keeps_its_data(data_root):
    import psycopg

    require_binary(str(PG_BIN / "initdb"))
    require_binary("runuser")
    port = free_port()
    env = {"POSTGRES_USER": "chex", "POSTGRES_PASSWORD": "s3cret pass", "POSTGRES_DB": "chexdb"}
    server = _start(data_root, env, port)
    try:
        with _connect(port, "chex", "s3cret pass", "chexdb") as conn:
            encoding, user, db = conn.execute(
                "SELECT pg_encoding_to_char(encoding), current_user, current_database() "
                "FROM pg_database WHERE datname = current_database()"
            ).fetchone()
            superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = 'chex'")
            assert (encoding, user, db) == ("UTF8", "chex", "chexdb")
            assert superuser.fetchone() == (True,)
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (27)")
            conn.commit()
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(port, "chex", "wrong", "chexdb")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(port, "postgres", "x", "postgres")  # no other role to fall back on
    finally:
        log = _stop(server)
    assert "created database chexdb owned by chex (UTF8)" in log
    assert "s3cret" not in log and not list(data_root.glob("tmp*"))  # no password file left

    # a restart on the same folder keeps the data and initialises nothing
    server = _start(data_root, {**env, "POSTGRES_DB": "other"}, port)
    try:
        with _connect(port, "chex", "s3cret pass", "chexdb") as conn:
            assert conn.execute("SELECT x FROM kept").fetchall() == [(27,)]
    finally:
        log = _stop(server)
    assert "created database" not in log


def test_the_stand_in_refuses_to_start_without_a_password(data_root):
    require_binary(str(PG_BIN / "initdb"))
    require_binary("runuser")
    server = _start(data_root, {"POSTGRES_USER": "chex"}, free_port())
    out, _ = server.communicate(timeout=HANG_GUARD_S)
    assert server.returncode == 1
    assert "POSTGRES_PASSWORD is not set" in out
    assert not (data_root / "data" / "PG_VERSION").exists()
