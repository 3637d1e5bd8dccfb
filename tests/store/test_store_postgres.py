"""The same store against a real PostgreSQL server (Debian's postgresql 15), the session's one
from the root conftest (``postgres_url``: a fresh database per test)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from case_picker_checks import check_case_picker
from store_fixtures import image_record, unit_vector

from chexretrieve.store import ImageFilter, open_store
from chexretrieve.store.schema import metadata

pytestmark = pytest.mark.service


def test_migrations_build_the_orm_schema_on_postgresql(postgres_url):
    store = open_store(postgres_url)
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
    store.close()
    open_store(postgres_url).close()  # a second open finds the schema at head


def test_store_api_on_postgresql(postgres_url):
    with open_store(postgres_url) as store:
        store.register_encoder("fake:a", 8, 20.0)
        for i in range(6):
            out = store.add_image_with_embedding(
                image_record(i, split="train"), unit_vector(i, 8), "fake:a",
                labels={"Edema": [1, 0, -1, None][i % 4]},
            )  # fmt: skip
            assert out.outcome == "ingested"
        conflict = store.add_image_with_embedding(image_record(2, pixels="x"), unit_vector(9, 8),
                                                  "fake:a")  # fmt: skip
        assert conflict.outcome == "conflict"
        gallery = store.gallery("fake:a", ImageFilter(labelled_for="Edema"))
        assert len(gallery.image_ids) == 5 and gallery.vectors.shape == (5, 8)  # i = 3 is blank
        np.testing.assert_array_equal(store.gallery("fake:a").vectors[0], unit_vector(0, 8))
        labels = store.labels_frame()
        assert labels["Edema"].isna().sum() == 1 and (labels["Edema"] == -1).sum() == 1
        matrix = np.stack([unit_vector(i, 8) for i in range(3)])
        store.put_anchor_embeddings("edema", "1", "h", "fake:a", matrix)
        np.testing.assert_array_equal(store.get_anchor_embeddings("edema", "1", "h", "fake:a"),
                                      matrix)  # fmt: skip
        run = store.start_run("fake:a", {})
        store.finish_run(run, "completed", {"ingested": 6})
        assert store.integrity_check() == []


def test_case_picker_and_thumbnails_on_postgresql(postgres_url):
    with open_store(postgres_url) as store:
        check_case_picker(store)


def test_racing_writers_insert_an_image_once_on_postgresql(postgres_url):
    stores = [open_store(postgres_url) for _ in range(4)]
    stores[0].register_encoder("fake:a", 8, 20.0)
    outcomes: list[str] = []
    barrier = threading.Barrier(len(stores))

    def write(store):
        barrier.wait()
        for i in range(10):
            result = store.add_image_with_embedding(image_record(i), unit_vector(i, 8), "fake:a")
            outcomes.append(result.outcome)

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(set(outcomes)) <= ["already-present", "ingested"]
    assert outcomes.count("ingested") == 10 and len(outcomes) == 40
    assert stores[0].count_images() == 10 and stores[0].integrity_check() == []
    for store in stores:
        store.close()


def test_ingest_into_postgresql(postgres_url, tmp_path, monkeypatch):
    from PIL import Image

    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig, ingest_paths

    rng = np.random.default_rng(5)
    for i in range(5):
        pixels = rng.integers(0, 256, size=(40, 40), dtype=np.uint8)
        Image.fromarray(pixels, mode="L").save(tmp_path / f"image{i}.png")
    with open_store(postgres_url) as store:
        encoder = StandInEncoder(dim=16)
        report = ingest_paths([tmp_path], store, encoder, IngestConfig(workers=0))
        assert report.counts["ingested"] == 5 and store.count_images() == 5
        again = ingest_paths([tmp_path], store, encoder, IngestConfig(workers=0))
        assert again.counts["already-present"] == 5
        assert store.gallery(encoder.encoder_id).metadata.source_format.tolist() == ["png"] * 5
        assert store.integrity_check() == []


def test_audit_anchors_only_move_forward_on_postgresql(postgres_url):
    """Issue 36: racing writers of one trail's anchor leave the highest seq (any order)."""
    from chexretrieve.store.audit_anchor import AuditAnchorTable

    open_store(postgres_url).close()
    tables = [AuditAnchorTable(postgres_url) for _ in range(4)]
    barrier = threading.Barrier(len(tables))

    def row(seq: int) -> dict:
        return {"trail": "t" * 64, "path": "/a/trail.jsonl", "seq": seq, "lines": seq,
                "size": 100 * seq, "last": f"{seq:064d}", "mac": "m" * 64}  # fmt: skip

    def write(j: int, table) -> None:  # noqa: ANN001
        barrier.wait()
        for seq in range(50 - j, 0, -4):  # every writer goes backwards from its own top
            table.write(row(seq))

    threads = [threading.Thread(target=write, args=(j, t)) for j, t in enumerate(tables)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    [stored] = tables[0].rows(path="/a/trail.jsonl")
    assert (stored["seq"], stored["lines"], stored["last"]) == (50, 50, f"{50:064d}")
    assert tables[0].write(row(49)) is False and tables[0].write(row(51)) is True
    assert tables[0].retire("t" * 64, "retired by x", "n" * 64)
    assert tables[0].rows(trail="t" * 64)[0]["retired"] == "retired by x"
    tables[0].write(row(52))  # written again: live again
    assert tables[0].rows(trail="t" * 64)[0]["retired"] is None
    for table in tables:
        table.close()
