"""Migrations build exactly the ORM schema; opening is idempotent; bad URLs fail clearly."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from chexretrieve.store import StoreConfig, StoreError, open_store
from chexretrieve.store.engine import current_revision, head_revision
from chexretrieve.store.schema import metadata


def test_migrated_schema_equals_orm_metadata(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, metadata)
    store.close()
    assert differences == []


def test_open_is_idempotent_and_at_head(tmp_path):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    first = open_store(url)
    first.register_encoder("fake:a", 8, 20.0)
    first.close()
    second = open_store(url)
    assert current_revision(second.engine) == head_revision(StoreConfig()) is not None
    assert [e.encoder_id for e in second.encoders()] == ["fake:a"]
    second.close()


def test_sqlite_connections_use_wal_foreign_keys_and_busy_timeout(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}", StoreConfig(busy_timeout_s=7))
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 7000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "cannot parse database URL"),
        ("sqlite://", "names no SQLite file"),
        ("sqlite:///:memory:", "names no SQLite file"),
        ("nosuchdb://host/x", "no database driver"),
    ],
)
def test_bad_urls_name_the_problem(url, message):
    with pytest.raises(StoreError, match=message):
        open_store(url)


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(StoreError, match="does not exist; create it"):
        open_store(f"sqlite:///{tmp_path / 'absent' / 's.sqlite'}")


def test_a_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("this is not a database\n" * 100)
    with pytest.raises(StoreError, match="cannot open database"):
        open_store(f"sqlite:///{path}")
    assert path.read_text().startswith("this is not a database")


def test_missing_migrations_folder_is_named(tmp_path):
    config = StoreConfig(migrations_dir=str(tmp_path / "nowhere"))
    with pytest.raises(StoreError, match="store migrations not found"):
        open_store(f"sqlite:///{tmp_path / 's.sqlite'}", config)
