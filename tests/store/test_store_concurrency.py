"""One writer at a time, readers never blocked: BEGIN IMMEDIATE + WAL on SQLite."""

from __future__ import annotations

import threading
import time

from sqlalchemy import text
from store_fixtures import image_record, unit_vector

from chexretrieve.store import StoreConfig, open_store

HANG_GUARD_S = 120  # only a hang reaches this: every wait below is normally milliseconds


def test_second_writer_waits_and_readers_see_the_last_commit(tmp_path):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    writer_a = open_store(url)
    writer_a.register_encoder("fake:a", 8, 20.0)
    writer_a.add_image_with_embedding(image_record(0), unit_vector(0, 8), "fake:a")
    writer_b = open_store(url)
    reader = open_store(url, StoreConfig(migrate_on_open=False))

    holding = threading.Event()
    release = threading.Event()

    def hold_write_lock():
        with writer_a._write() as conn:
            conn.execute(text("UPDATE encoders SET inv_temperature = 21.0"))
            holding.set()
            release.wait(HANG_GUARD_S)

    holder = threading.Thread(target=hold_write_lock)
    holder.start()
    assert holding.wait(HANG_GUARD_S)

    finished = {}
    trying = threading.Event()

    def second_writer():
        trying.set()
        outcome = writer_b.add_image_with_embedding(image_record(1), unit_vector(1, 8), "fake:a")
        finished["outcome"] = outcome.outcome
        finished["after release"] = release.is_set()

    waiter = threading.Thread(target=second_writer)
    waiter.start()
    assert trying.wait(HANG_GUARD_S)
    time.sleep(0.3)  # time for the second writer to reach the lock (the check holds either way)
    assert "outcome" not in finished  # queued behind the lock, not failed
    gallery = reader.gallery("fake:a")  # readers are not blocked by the writer:
    assert holder.is_alive() and not release.is_set()  # read while the lock was still held
    assert len(gallery.image_ids) == 1
    release.set()
    holder.join(HANG_GUARD_S)
    waiter.join(HANG_GUARD_S)
    assert finished == {"outcome": "ingested", "after release": True}
    assert len(reader.gallery("fake:a").image_ids) == 2
    assert reader.integrity_check() == []
    for store in (writer_a, writer_b, reader):
        store.close()


def test_many_threads_writing_and_reading_see_no_lock_errors(tmp_path):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    store = open_store(url)
    store.register_encoder("fake:a", 8, 20.0)
    errors: list[BaseException] = []

    def write(offset):
        try:
            for i in range(offset, offset + 15):
                store.add_image_with_embedding(image_record(i), unit_vector(i, 8), "fake:a")
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    def read():
        try:
            for _ in range(20):
                store.gallery("fake:a")
                store.labels_frame()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k * 100,)) for k in range(3)]
    threads += [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD_S)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert store.count_images() == 45 and store.integrity_check() == []
    store.close()
