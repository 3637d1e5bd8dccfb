"""Opening a database: URL checks, SQLite tuning for one writer and many readers, migrations.

SQLite: every connection runs in WAL mode with foreign keys on and a busy timeout. The DB-API
driver's own transaction handling is switched off (``isolation_level = None``) and SQLAlchemy's
``begin`` emits ``BEGIN IMMEDIATE`` on connections marked as writers and a plain ``BEGIN``
elsewhere. A writer thus takes the write lock before it reads, so two writers queue on the busy
timeout instead of failing with "database is locked" halfway through, and readers (WAL snapshots)
never wait for a writer.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from chexretrieve.store.config import StoreConfig

#: execution option that marks a connection as the writer (BEGIN IMMEDIATE on SQLite)
WRITER_OPTION = "chexretrieve_writer"


class StoreError(ValueError):
    """The database cannot be opened or used; the message names the problem and what to do."""


def migrations_folder(config: StoreConfig) -> Path:
    """The Alembic folder (env.py + versions/): the setting, else the repository's ``db/``."""
    if config.migrations_dir:
        folder = Path(config.migrations_dir)
    else:
        folder = Path(__file__).resolve().parents[2] / "db"
    if not (folder / "env.py").is_file() or not (folder / "versions").is_dir():
        raise StoreError(
            f"store migrations not found in {folder} (expected env.py and versions/); run from "
            "a chexretrieve checkout (pip install -e .) or set StoreConfig.migrations_dir to "
            "its db/ folder"
        )
    return folder


def create_store_engine(config: StoreConfig) -> Engine:
    """A SQLAlchemy engine for ``config.url``; StoreError for a bad URL or a missing driver."""
    try:
        url = make_url(config.url)
    except ArgumentError as exc:
        raise StoreError(
            f"cannot parse database URL {config.url!r}: {exc}; expected e.g. "
            "sqlite:///archive.sqlite or postgresql+psycopg://user@host:5432/dbname"
        ) from None
    is_sqlite = url.get_backend_name() == "sqlite"
    # hide_parameters: a database error's message (shown and logged) never carries row values,
    # which hold patient data
    kwargs: dict = {"echo": config.echo_sql, "hide_parameters": True}
    if is_sqlite:
        database = url.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            raise StoreError(
                f"database URL {config.url!r} names no SQLite file; an in-memory store would "
                "vanish at exit and cannot be shared with readers; give a file, e.g. "
                "sqlite:///archive.sqlite"
            )
        path = Path(database).expanduser().resolve()
        if not config.create_if_missing and not path.is_file():
            raise StoreError(
                f"no chexretrieve store at {path}; ingest an archive into it first "
                "(`chexretrieve ingest FOLDER --db URL`), run `make demo`, or give another --db"
            )
        folder = path.parent
        if not folder.is_dir():
            raise StoreError(
                f"folder {folder} of the SQLite database {database!r} does not exist; create it "
                "or choose another --db"
            )
        kwargs["connect_args"] = {"timeout": config.busy_timeout_s, "check_same_thread": False}
        if config.read_only and path.is_file():
            kwargs["creator"] = read_only_creator(path, config.busy_timeout_s)
    try:
        engine = create_engine(url, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as exc:
        raise StoreError(
            f"no database driver for {url.drivername!r} ({exc}); install it, e.g. "
            "pip install 'psycopg[binary]' for postgresql+psycopg://"
        ) from None
    if is_sqlite:
        _tune_sqlite(engine, config)
    return engine


def _tune_sqlite(engine: Engine, config: StoreConfig) -> None:
    synchronous = config.sqlite_synchronous.upper()
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise StoreError(
            f"StoreConfig.sqlite_synchronous={config.sqlite_synchronous!r} is not one of "
            "OFF, NORMAL, FULL, EXTRA"
        )
    timeout_ms = int(config.busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # noqa: ANN001
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (see module docstring)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")
        if not config.read_only:  # setting the journal mode may write; a reader keeps the file's
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        writer = connection.get_execution_options().get(WRITER_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")


def unwritable(path: Path) -> bool:
    """True when the process cannot write ``path`` (immutable, read-only mount, permissions)."""
    return not os.access(path, os.W_OK)


def read_only_creator(path: Path, timeout_s: float):  # noqa: ANN201
    """A DB-API connection factory opening ``path`` read-only: SQLite's ``mode=ro``, and when
    the folder cannot be written either (no WAL index can be created beside the file: a read-only
    mount) ``immutable=1``, which reads the file as it is."""
    uri = f"file:{path.as_posix()}?mode=ro"
    if unwritable(path.parent):
        # no WAL index can be created beside the file (a read-only mount): read it as it is
        uri += "&immutable=1"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, timeout=timeout_s, check_same_thread=False)

    return connect


def run_migrations(engine: Engine, config: StoreConfig) -> None:
    """Bring the schema to the newest Alembic revision, under the write lock."""
    from alembic import command
    from alembic.config import Config

    folder = migrations_folder(config)
    alembic_config = Config()
    alembic_config.set_main_option("script_location", str(folder))
    alembic_config.set_main_option("sqlalchemy.url", engine.url.render_as_string(False))
    with engine.connect() as connection:
        connection = connection.execution_options(**{WRITER_OPTION: True})
        with connection.begin():
            alembic_config.attributes["connection"] = connection
            command.upgrade(alembic_config, "head")


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision(config: StoreConfig) -> str | None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    alembic_config = Config()
    alembic_config.set_main_option("script_location", str(migrations_folder(config)))
    return ScriptDirectory.from_config(alembic_config).get_current_head()


def database_label(url: str) -> str:
    """The URL with any password hidden, for reports and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def database_identity(url: str) -> str:
    """Which store a URL names, for the prior's rule (a private report corpus joins the prior of
    the store it came from): a SQLite file by its resolved path, another database by its URL
    without the password."""
    path = sqlite_file(url)
    return f"sqlite:///{path.expanduser().resolve()}" if path is not None else database_label(url)


def sqlite_file(url: str) -> Path | None:
    """The database file a ``sqlite:///`` URL names (None for other databases or bad URLs)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database).expanduser()


def default_db_url() -> str:
    from chexretrieve.store.config import DEFAULT_DB_URL

    return os.environ.get("CHEXRETRIEVE_DB") or DEFAULT_DB_URL
