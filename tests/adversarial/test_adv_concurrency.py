"""20 concurrent readers while a writer holds SQLite's write lock: nobody sees "database is locked".

The writer is a separate process that keeps taking the write lock (``BEGIN IMMEDIATE``) and holding
it for 1.5 s with rows written, the worst an ingest batch does. Meanwhile 20 threads of one server
process read through the store the way the UI does (gallery reloads, labels, single images,
counts) and search with a shared search service, and one thread writes through the store (the
anchor-embedding cache), which must wait for the lock, not fail.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
from adv_support import REPO
from ingest_fixtures import write_archive

from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.ingest.stand_in import StandInEncoder
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest, SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
from chexretrieve.store import open_store

READERS = 20
SECONDS = 12.0
HOLD_S = 1.5

LOCK_HOG = r"""
import sqlite3, sys, time
db, seconds, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
conn = sqlite3.connect(db, timeout=60, isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE IF NOT EXISTS lock_hog (id INTEGER PRIMARY KEY, payload BLOB)")
end, held = time.monotonic() + seconds, 0
while time.monotonic() < end:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO lock_hog (payload) VALUES (randomblob(100000))")
    time.sleep(hold)
    conn.execute("COMMIT")
    held += 1
    time.sleep(0.05)
print(held)
"""


def test_20_readers_and_a_cache_writer_while_the_write_lock_is_held(tmp_path, cases):
    archive = tmp_path / "archive"
    write_archive(archive, 60, size=32)
    db = tmp_path / "store.sqlite"
    store = open_store(f"sqlite:///{db}")
    encoder = StandInEncoder(dim=32)
    ingest_paths([archive], store, encoder, IngestConfig(workers=0, batch_size=16))
    service = SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        StoreAnchorProvider(store, encoder),
        encoder=encoder,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )
    ids = [int(i) for i in service.gallery.image_ids]
    hog = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOG, str(db), str(SECONDS), str(HOLD_S)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)  # the hog holds the lock from here on, most of the time
    errors: list[str] = []
    counts = {"reads": 0, "searches": 0, "cache writes": 0}
    lock = threading.Lock()
    deadline = time.monotonic() + SECONDS - 1.0

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while time.monotonic() < deadline:
            try:
                if seed % 2:
                    service.refresh()
                    service.search(SearchRequest(finding="Edema", case_id=int(rng.choice(ids))))
                    kind = "searches"
                else:
                    gallery = store.gallery(encoder.encoder_id)
                    store.labels_frame(gallery.image_ids[:10])
                    store.image_by_id(int(rng.choice(ids)))
                    store.count_images()
                    kind = "reads"
                with lock:
                    counts[kind] += 1
            except Exception as exc:  # noqa: BLE001 - what a user would see
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])

    def cache_writer() -> None:
        for version in range(3):
            try:
                matrix = np.full((4, 32), version, dtype=np.float32)
                store.put_anchor_embeddings(
                    "adv-set", str(version), f"hash{version}", encoder.encoder_id, matrix
                )
                with lock:
                    counts["cache writes"] += 1
            except Exception as exc:  # noqa: BLE001
                with lock:
                    errors.append(f"cache write: {type(exc).__name__}: {exc}"[:200])

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(READERS)]
    threads.append(threading.Thread(target=cache_writer))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = int(hog.communicate(timeout=60)[0].strip() or 0)
    store.close()
    locked = [e for e in errors if "locked" in e.lower()]
    cases.check("no 'database is locked' reached a reader", not locked, str(locked[:3]))
    cases.check("no other error reached a reader", not errors, str(errors[:3]))
    cases.check("the writer really held the lock", held >= 4, f"held {held} times")
    cases.check(
        "readers made progress", counts["reads"] > 20 and counts["searches"] > 20, str(counts)
    )
    cases.check("the cache writer waited and wrote", counts["cache writes"] == 3, str(counts))
    cases.figure("reads", counts["reads"])
    cases.figure("searches", counts["searches"])
    cases.figure("lock held (times x 1.5 s)", held)
    assert not errors and held >= 4 and counts["cache writes"] == 3
    assert counts["reads"] > 20 and counts["searches"] > 20
