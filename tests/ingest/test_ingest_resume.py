"""kill -9 an ingest at random moments, resume, and check that nothing was lost or doubled."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from ingest_fixtures import write_archive

from chexretrieve.store import open_store

REPO = Path(__file__).resolve().parents[2]
N_IMAGES = 60


def stored_images(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM images").fetchone()[0]
    except sqlite3.Error:
        return 0  # not created or not migrated yet


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_minus_nine_at_random_moments_then_resume(tmp_path):
    archive = tmp_path / "archive"
    write_archive(archive, N_IMAGES, size=32)
    db = tmp_path / "store.sqlite"
    command = [
        sys.executable, "-m", "chexretrieve", "ingest", str(archive),
        "--db", f"sqlite:///{db}", "--encoder", "stand-in:25",
        "--batch-size", "4", "--workers", "1", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1"}
    rng = random.Random(20261129)
    kills = 0
    leftovers: set[int] = set()
    for attempt in range(4):
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if attempt == 0:
            time.sleep(rng.uniform(0.3, 1.5))  # during start-up or migrations
        else:
            target = min(N_IMAGES - 1, stored_images(db) + rng.randint(1, 14))
            deadline = time.monotonic() + 60
            while process.poll() is None and time.monotonic() < deadline:
                if stored_images(db) >= target:
                    break
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.12))  # anywhere inside the next batch
        if process.poll() is None:
            leftovers |= descendants(process.pid)
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        process.wait(30)
    assert kills >= 3
    assert 0 < stored_images(db) < N_IMAGES

    report_path = tmp_path / "resume.json"
    finished = subprocess.run(
        [*command, "--report", str(report_path)], cwd=REPO, env=env, capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    report = json.loads(report_path.read_text())
    assert report["counts"]["ingested"] + report["counts"]["already-present"] == N_IMAGES
    assert report["counts"]["ingested"] > 0 and report["counts"]["rejected"] == 0

    with open_store(f"sqlite:///{db}") as store:
        assert store.count_images() == N_IMAGES
        sops = store.execute_readonly_sql("SELECT COUNT(DISTINCT sop_uid) FROM images")
        assert sops == [(N_IMAGES,)]
        assert store.count_embeddings("stand-in:d32") == N_IMAGES
        assert store.integrity_check() == []
        assert store.execute_readonly_sql("PRAGMA integrity_check") == [("ok",)]
        statuses = store.runs_frame().status.tolist()
        # a run killed before it registered leaves no row; every other killed run is marked
        assert statuses[-1] == "completed" and len(statuses) >= kills
        assert statuses[:-1] == ["interrupted"] * (len(statuses) - 1)
        before = store.table_counts()

    again = subprocess.run(
        [*command, "--report", str(report_path)], cwd=REPO, env=env, capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert again.returncode == 0
    assert json.loads(report_path.read_text())["counts"]["already-present"] == N_IMAGES
    with open_store(f"sqlite:///{db}") as store:
        after = store.table_counts()
    for table in ("studies", "images", "embeddings", "labels", "source_files", "encoders"):
        assert after[table] == before[table], table

    # the decoding processes of killed runs exit on their own (their parent's pipes closed)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in leftovers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in leftovers if alive(pid)]
