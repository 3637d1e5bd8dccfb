"""Settings of the store: which database, how SQLite is tuned, whether migrations run on open."""

from __future__ import annotations

from dataclasses import dataclass

#: the database used when neither ``--db`` nor ``CHEXRETRIEVE_DB`` names one: a SQLite file in the
#: current working folder
DEFAULT_DB_URL = "sqlite:///chexretrieve.sqlite"


@dataclass(frozen=True)
class StoreConfig:
    # SQLAlchemy URL of the database, e.g. "sqlite:///archive.sqlite" or
    # "postgresql+psycopg://user@host:5432/db"
    url: str = DEFAULT_DB_URL
    # seconds a connection waits for another writer's lock before giving up (SQLite busy timeout)
    busy_timeout_s: float = 60.0
    # SQLite "synchronous" pragma under WAL: NORMAL survives a killed process, FULL also power loss
    sqlite_synchronous: str = "NORMAL"
    # apply pending Alembic migrations (top-level db/) when the store is opened
    migrate_on_open: bool = True
    # folder holding Alembic's env.py and versions/; empty = the repository's db/ folder
    migrations_dir: str = ""
    # log every SQL statement (debugging only)
    echo_sql: bool = False
    # create a missing SQLite file (ingest); False = refuse with StoreError, as read-only commands
    # (search, serve) do, so a mistyped --db never leaves an empty store behind
    create_if_missing: bool = True
    # open for reading only (search, serve): no migration, no write (a write raises StoreError); a
    # store of another schema version is refused with what to run, a SQLite file that cannot be
    # written (immutable, read-only mount) is opened read-only
    read_only: bool = False
