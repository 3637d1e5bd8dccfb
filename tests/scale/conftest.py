"""Fixtures of the scale tests: a real PostgreSQL server (one per session, a database per test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale_helpers import require, require_binary  # noqa: E402
from scale_postgres_server import PG_BIN, PostgresServer  # noqa: E402


@pytest.fixture(scope="session")
def postgres_server():
    require_binary(str(PG_BIN / "initdb"))
    require_binary(str(PG_BIN / "pg_ctl"))
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require(False, "the psycopg driver (pip install 'psycopg[binary]')")
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """SQLAlchemy URL of a fresh, empty database on the session's server."""
    return postgres_server.create_database()
