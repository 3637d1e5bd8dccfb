"""kill -9 during ingest five times at random moments, then resume: nothing lost, nothing doubled.

Extends ``tests/ingest/test_ingest_resume.py`` (its helpers are imported, not copied): five kills
guaranteed, at three kinds of moment (start-up and migrations, right after a batch commits,
anywhere inside a batch), with bad files mixed into the archive; then one resuming run, checked for
the unique count, duplicates, images without embeddings and SQLite's integrity check, and a
further run that must change nothing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import test_ingest_resume as resume
from ingest_fixtures import write_archive, write_bad_files

from chexretrieve.store import open_store

N_GOOD = 90
KILLS = 5
SEED = 99_2026


def _command(archive, db, report=None):  # noqa: ANN001, ANN202
    command = [
        sys.executable, "-m", "chexretrieve", "ingest", str(archive), "--db", f"sqlite:///{db}",
        "--encoder", "stand-in:30", "--batch-size", "4", "--workers", "1", "--no-progress",
    ]  # fmt: skip
    return command + (["--report", str(report)] if report else [])


@pytest.mark.slow
def test_five_kills_at_random_moments_then_resume(tmp_path, cases):
    archive = tmp_path / "archive"
    write_archive(archive, N_GOOD, size=32)
    bad = write_bad_files(archive / "bad")
    db = tmp_path / "store.sqlite"
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1"}
    rng = random.Random(SEED)
    kills, moments, leftovers = 0, [], set()
    for _attempt in range(10):
        if kills == KILLS:
            break
        process = subprocess.Popen(
            _command(archive, db), cwd=resume.REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        moment = rng.choice(["start-up", "after-commit", "inside-batch"])
        if moment == "start-up":
            time.sleep(rng.uniform(0.2, 2.5))
        else:
            target = min(N_GOOD - 1, resume.stored_images(db) + rng.randint(1, 10))
            deadline = time.monotonic() + 90
            while process.poll() is None and time.monotonic() < deadline:
                if resume.stored_images(db) >= target:
                    break
                time.sleep(0.005)
            if moment == "inside-batch":
                time.sleep(rng.uniform(0.0, 0.15))
        if process.poll() is None:
            leftovers |= resume.descendants(process.pid)
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
            moments.append(f"{moment}@{resume.stored_images(db)}")
        process.wait(30)
    cases.check("five kills landed before the archive was done", kills == KILLS, str(moments))
    cases.figure("kills", kills)
    cases.figure("moments", ", ".join(moments))
    assert kills == KILLS
    before_resume = resume.stored_images(db)
    assert before_resume < N_GOOD

    report_path = tmp_path / "resume.json"
    finished = subprocess.run(_command(archive, db, report_path), cwd=resume.REPO, env=env,
                              capture_output=True, timeout=300)  # fmt: skip
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    report = json.loads(report_path.read_text())
    with open_store(f"sqlite:///{db}") as store:
        count = store.count_images()
        distinct = store.execute_readonly_sql(
            "SELECT COUNT(DISTINCT sop_uid), COUNT(DISTINCT pixel_sha256) FROM images"
        )[0]
        without = store.execute_readonly_sql(
            "SELECT COUNT(*) FROM images i WHERE NOT EXISTS "
            "(SELECT 1 FROM embeddings e WHERE e.image_id = i.id)"
        )[0][0]
        problems = store.integrity_check()
        sqlite_check = store.execute_readonly_sql("PRAGMA integrity_check")
        before = store.table_counts()
    checks = {
        "right unique count": count == N_GOOD,
        "no duplicate SOP UIDs or pixels": distinct == (N_GOOD, N_GOOD),
        "no image without embedding": without == 0,
        "store integrity_check empty": problems == [],
        "PRAGMA integrity_check ok": sqlite_check == [("ok",)],
        "bad files rejected on resume": report["counts"]["rejected"] == len(bad),
        "resume adds the rest": report["counts"]["ingested"] == N_GOOD - before_resume,
    }
    for name, ok in checks.items():
        cases.check(name, ok, f"count {count}, distinct {distinct}, without {without}, "
                              f"problems {problems[:3]}, report {report['counts']}")  # fmt: skip
    assert all(checks.values()), checks

    again = subprocess.run(_command(archive, db, report_path), cwd=resume.REPO, env=env,
                           capture_output=True, timeout=300)  # fmt: skip
    assert again.returncode == 0
    counts = json.loads(report_path.read_text())["counts"]
    with open_store(f"sqlite:///{db}") as store:
        after = store.table_counts()
    tables = ("studies", "images", "embeddings", "labels", "source_files", "encoders")
    unchanged = all(after[t] == before[t] for t in tables)
    cases.check("a further run changes nothing", unchanged and counts["ingested"] == 0,
                f"{before} -> {after}; {counts}")  # fmt: skip
    assert unchanged and counts["already-present"] == N_GOOD and counts["ingested"] == 0

    deadline = time.monotonic() + 10
    while any(resume.alive(pid) for pid in leftovers) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = [pid for pid in leftovers if resume.alive(pid)]
    cases.check("no orphaned decoding process", not orphans, str(orphans))
    assert not orphans
