"""20 concurrent readers while a writer holds SQLite's write lock: nobody sees "database is locked".

The writer is a separate process that keeps taking the write lock (``BEGIN IMMEDIATE``) and holding
it for 1.5 s with rows written, the worst an ingest batch does, until the test tells it to stop.
Meanwhile 20 threads of one server process read through the store the way the UI does (gallery
reloads, labels, single images, counts) and search with a shared search service, and one thread
writes through the store (the anchor-embedding cache), which must wait for the lock, not fail.

Nothing here depends on machine speed: every reader does a fixed amount of work and keeps going
only until one of its operations is known to have run entirely inside a hold of the lock (the hog
reports each hold's start and end on the shared monotonic clock). The only time limit is a hang
guard far above the few seconds this takes.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
from adv_support import REPO
from ingest_fixtures import write_archive

from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest, SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
from chexretrieve.store import open_store

READERS = 20
OPS_PER_READER = 3  # fixed work per reader; more only until one op fell inside a hold
HOLD_S = 1.5
HANG_GUARD_S = 300.0  # typically ~5 s: only a hang trips this

# prints "hold START END" (time.monotonic, the same clock as the test's) after each hold;
# stops when the stop file appears (or after the hang guard), then prints how many holds it made
LOCK_HOG = r"""
import os, sqlite3, sys, time
db, stop_file, hold, guard = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
conn = sqlite3.connect(db, timeout=60, isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE IF NOT EXISTS lock_hog (id INTEGER PRIMARY KEY, payload BLOB)")
end, held = time.monotonic() + guard, 0
while not os.path.exists(stop_file) and time.monotonic() < end:
    conn.execute("BEGIN IMMEDIATE")
    start = time.monotonic()
    conn.execute("INSERT INTO lock_hog (payload) VALUES (randomblob(100000))")
    time.sleep(hold)
    stop = time.monotonic()
    conn.execute("COMMIT")
    held += 1
    print(f"hold {start} {stop}", flush=True)
    time.sleep(0.05)
print(f"held {held}", flush=True)
"""


class HoldLog:
    """The hog's completed holds, read from its stdout by a thread."""

    def __init__(self, stream) -> None:  # noqa: ANN001
        self.holds: list[tuple[float, float]] = []
        self.total = -1
        self._lock = threading.Lock()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:  # noqa: ANN001
        for line in stream:
            word, *numbers = line.split()
            with self._lock:
                if word == "hold":
                    self.holds.append((float(numbers[0]), float(numbers[1])))
                    self._first.set()
                elif word == "held":
                    self.total = int(numbers[0])
        self._first.set()

    def wait_for_first_hold(self, timeout: float) -> bool:
        return self._first.wait(timeout)

    def inside_a_hold(self, start: float, stop: float) -> bool:
        with self._lock:
            return any(a <= start and stop <= b for a, b in self.holds)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


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
    stop_file = tmp_path / "stop-hog"
    hog = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOG, str(db), str(stop_file), str(HOLD_S), str(HANG_GUARD_S)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    holds = HoldLog(hog.stdout)
    errors: list[str] = []
    counts = {"reads": 0, "searches": 0, "cache writes": 0}
    inside = {}  # reader -> how many of its operations ran entirely inside a hold
    lock = threading.Lock()
    deadline = time.monotonic() + HANG_GUARD_S

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        done, spans = 0, []
        while time.monotonic() < deadline:
            if done >= OPS_PER_READER and any(holds.inside_a_hold(*s) for s in spans):
                break
            start = time.monotonic()
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
                spans.append((start, time.monotonic()))
                done += 1
                with lock:
                    counts[kind] += 1
            except Exception as exc:  # noqa: BLE001 - what a user would see
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                return
        with lock:
            inside[seed] = sum(holds.inside_a_hold(*s) for s in spans)

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

    try:
        # the readers start once the hog has held the lock at least once (it then keeps holding it
        # ~97% of the time)
        assert holds.wait_for_first_hold(HANG_GUARD_S), "the lock hog never held the lock"
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(READERS)]
        threads.append(threading.Thread(target=cache_writer))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(1.0, deadline - time.monotonic()))
        hung = [t.name for t in threads if t.is_alive()]
    finally:
        stop_file.touch()
        hog.wait(timeout=60)
        holds.join(timeout=10)
        store.close()
    locked = [e for e in errors if "locked" in e.lower()]
    cases.check("every reader and the cache writer finished", not hung, str(hung))
    cases.check("no 'database is locked' reached a reader", not locked, str(locked[:3]))
    cases.check("no other error reached a reader", not errors, str(errors[:3]))
    cases.check(
        "every reader did its work, some of it while the lock was held",
        len(inside) == READERS and all(n >= 1 for n in inside.values()),
        f"operations inside a hold per reader: {inside}",
    )
    cases.check("the cache writer waited and wrote", counts["cache writes"] == 3, str(counts))
    cases.figure("reads", counts["reads"])
    cases.figure("searches", counts["searches"])
    cases.figure("lock held (times x 1.5 s)", holds.total)
    assert not hung and not errors and counts["cache writes"] == 3
    assert len(inside) == READERS and all(n >= 1 for n in inside.values()), inside
    assert counts["reads"] + counts["searches"] >= READERS * OPS_PER_READER
