"""The store against a real PostgreSQL 15 server that the tests start on 127.0.0.1.

Every scenario of ``tests/store/test_store_api.py`` runs again here on PostgreSQL (the functions
are imported, so new store scenarios are covered automatically), plus: migrations build the ORM
schema, concurrent writers and readers, and an ingest of a phantom archive that must leave exactly
the content it leaves in SQLite. Switching is one URL: nothing else differs between the runs.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from scale_helpers import import_sibling_tests, make_phantom_archive, store_content

from chexretrieve.store import open_store
from chexretrieve.store.engine import current_revision, head_revision
from chexretrieve.store.schema import metadata

pytestmark = pytest.mark.service

store_api = import_sibling_tests("store", "test_store_api")
store_fixtures = import_sibling_tests("store", "store_fixtures")

# every store API scenario, collected again in this module where ``store`` is a PostgreSQL store
STORE_SCENARIOS = sorted(name for name in vars(store_api) if name.startswith("test_"))
globals().update({f"{name}_on_postgresql": getattr(store_api, name) for name in STORE_SCENARIOS})


@pytest.fixture
def store(postgres_url):
    opened = open_store(postgres_url)
    opened.register_encoder("fake:a", 8, 20.0)
    opened.register_encoder("fake:b", 4, 30.0)
    yield opened
    opened.close()


def test_the_store_scenarios_were_picked_up():
    assert len(STORE_SCENARIOS) >= 10
    assert all(callable(globals()[f"{name}_on_postgresql"]) for name in STORE_SCENARIOS)


def test_migrated_schema_equals_orm_metadata_on_postgresql(postgres_url):
    with open_store(postgres_url) as store:
        assert store.dialect == "postgresql"
        with store.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
    with open_store(postgres_url) as again:  # opening twice is idempotent
        assert current_revision(again.engine) == head_revision(again.config)


def test_concurrent_writers_and_readers_on_postgresql(postgres_url):
    image_record, unit_vector = store_fixtures.image_record, store_fixtures.unit_vector
    store = open_store(postgres_url)
    store.register_encoder("fake:a", 8, 20.0)
    errors: list[BaseException] = []

    def write(offset):
        try:
            for i in range(offset, offset + 10):
                # two writers share every other image: exactly one of them may insert it
                store.add_image_with_embedding(image_record(i), unit_vector(i, 8), "fake:a")
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    def read():
        try:
            for _ in range(10):
                store.gallery("fake:a")
                store.labels_frame()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k * 5,)) for k in range(3)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert store.count_images() == 20 and store.integrity_check() == []
    store.close()


@pytest.fixture(scope="module")
def phantom_archive(tmp_path_factory):
    return make_phantom_archive(tmp_path_factory.mktemp("phantom") / "archive", n=6)


def test_ingest_gives_the_same_content_in_postgresql_and_sqlite(
    postgres_url, phantom_archive, tmp_path
):
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig, ingest_paths, read_label_csv

    encoder = StandInEncoder(dim=16)
    config = IngestConfig(workers=0, batch_size=4)
    contents = []
    for url in (f"sqlite:///{tmp_path / 'store.sqlite'}", postgres_url):
        with open_store(url) as store:
            labels = read_label_csv(phantom_archive / "labels.csv")
            report = ingest_paths([phantom_archive], store, encoder, config, labels=labels)
            assert report.counts["ingested"] == 6 and report.labelled_files == 6
            again = ingest_paths([phantom_archive], store, encoder, config)
            assert again.counts["already-present"] == 6 and store.count_images() == 6
            assert store.integrity_check() == []
            contents.append(store_content(store, encoder.encoder_id))
    sqlite_content, postgres_content = contents
    assert sqlite_content.keys() == postgres_content.keys() and len(sqlite_content) == 6
    assert sqlite_content == postgres_content
    assert any(item.get("labels") for item in postgres_content.values())
    vectors = [np.frombuffer(item["embedding"], np.float32) for item in postgres_content.values()]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
