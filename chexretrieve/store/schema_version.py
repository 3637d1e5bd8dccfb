"""Which schema version a store has, against the one this chexretrieve expects, and opening a
SQLite store read-only (``StoreConfig.read_only``: ``search`` and ``serve``).

A read-only open never migrates: an older store gets a message to run ``chexretrieve db upgrade``,
a newer one a line naming both versions (upgrade chexretrieve). A SQLite file that cannot be
written (an immutable file, a read-only mount, no write permission) is opened with SQLite's
``mode=ro``; when its folder cannot be written either (SQLite could not create the WAL index
beside it: a read-only mount) also with ``immutable=1``, which reads the file as it is (nobody
can write it there either).
"""

from __future__ import annotations

from sqlalchemy import Engine

from chexretrieve.store.config import StoreConfig
from chexretrieve.store.engine import (
    StoreError,
    current_revision,
    database_label,
    migrations_folder,
    unwritable,
)


def _script_directory(config: StoreConfig):  # noqa: ANN202
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    alembic_config = Config()
    alembic_config.set_main_option("script_location", str(migrations_folder(config)))
    return ScriptDirectory.from_config(alembic_config)


def known_revisions(config: StoreConfig) -> list[str]:
    """Every schema revision this chexretrieve knows, oldest first."""
    return [r.revision for r in reversed(list(_script_directory(config).walk_revisions()))]


def expected_revision(config: StoreConfig) -> str | None:
    return _script_directory(config).get_current_head()


def check_schema(engine: Engine, config: StoreConfig) -> None:
    """StoreError unless the store's schema is exactly the one this chexretrieve expects."""
    label = database_label(config.url)
    found = current_revision(engine)
    head = expected_revision(config)
    if found == head:
        return
    if found is None:
        raise StoreError(
            f"{label} has no chexretrieve schema version (an empty file, or not a chexretrieve "
            "store); ingest into it first (`chexretrieve ingest FOLDER --db URL`) or give another "
            "--db"
        )
    if found not in known_revisions(config):
        raise _newer(label, found, head)
    raise StoreError(
        f"{label} has schema version {found}, older than this chexretrieve's {head}; run "
        f"`chexretrieve db upgrade --db {label}` once (read commands never change a store)"
    )


def newer_schema_error(config: StoreConfig, exc: BaseException) -> StoreError:
    """The one-line error for Alembic's "Can't locate revision 'X'" (a newer store)."""
    import re

    found = re.search(r"revision identified by '([^']+)'", str(exc))
    return _newer(
        database_label(config.url),
        found.group(1) if found else "unknown",
        expected_revision(config),
    )


def open_failure(config: StoreConfig, exc: BaseException) -> str:
    """What to say when the database cannot be opened (``exc``: the driver's error)."""
    from chexretrieve.store.engine import sqlite_file

    label = database_label(config.url)
    reason = getattr(exc, "orig", exc)
    path = sqlite_file(config.url)
    if path is not None and path.is_file() and (unwritable(path) or unwritable(path.parent)):
        if config.read_only:
            return f"cannot read the read-only store {label}: {reason}"
        return (
            f"the store {label} cannot be written ({reason}): the file or its folder is "
            "read-only (an immutable file or a read-only mount); a writing command needs a "
            "writable copy, while `search` and `serve` read it as it is"
        )
    return (
        f"cannot open database {label}: {reason}; check the URL, that the server is running "
        "and that the file is a chexretrieve store"
    )


def refuse_unwritable(config: StoreConfig) -> None:
    """StoreError before a writing command touches a SQLite store it cannot write."""
    from chexretrieve.store.engine import sqlite_file

    path = sqlite_file(config.url)
    if path is not None and path.is_file() and (unwritable(path) or unwritable(path.parent)):
        raise StoreError(open_failure(config, PermissionError("read-only")))


def _newer(label: str, found: str, head: str | None) -> StoreError:
    return StoreError(
        f"{label} has schema version {found}, which this chexretrieve (schema {head}) does not "
        "know: it was written by a newer chexretrieve; upgrade chexretrieve to read it"
    )


def is_unknown_revision_error(exc: BaseException) -> bool:
    """Alembic's complaint about a revision in the database that its scripts do not have."""
    text = str(exc)
    return "Can't locate revision" in text or "No such revision" in text


def schema_versions(url: str) -> tuple[str | None, str | None]:
    """(the store's schema version, the one this chexretrieve expects) of an existing store,
    read without changing it."""
    from chexretrieve.store.engine import create_store_engine

    config = StoreConfig(url=url, create_if_missing=False, read_only=True)
    engine = create_store_engine(config)
    try:
        return current_revision(engine), expected_revision(config)
    finally:
        engine.dispose()


def upgrade_store(url: str) -> tuple[str | None, str | None]:
    """Migrate an existing store to this chexretrieve's schema; (version before, after).
    StoreError for a store of a newer schema (nothing is changed)."""
    from chexretrieve.store.engine import create_store_engine, run_migrations

    found, head = schema_versions(url)
    config = StoreConfig(url=url, create_if_missing=False)
    if found is not None and found != head and found not in known_revisions(config):
        raise _newer(database_label(url), found, head)
    engine = create_store_engine(config)
    try:
        run_migrations(engine, config)
    finally:
        engine.dispose()
    return found, schema_versions(url)[0]
