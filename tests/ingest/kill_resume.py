"""One kill -9 experiment shared by two tests (issue 16: the two kill -9 archives cost ~20 s each).

``run_kill_resume`` writes one archive (``N_GOOD`` good radiographs plus one file per kind of bad
input), kills ``chexretrieve ingest`` with SIGKILL ``KILLS`` times at random moments of three kinds
(start-up and migrations, right after a batch commits, anywhere inside a batch), then lets one run
finish (the resume) and one more run go over the same archive (which must change nothing), and
records what the store and the reports say. The root conftest runs it once per session
(``kill_resume_run``); ``tests/ingest/test_ingest_resume.py`` and
``tests/adversarial/test_adv_kill.py`` assert on the record.

Nothing here depends on machine speed: a kill "inside a batch" waits for a stored count, not for a
time; every time limit is a hang guard.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ingest_fixtures import write_archive, write_bad_files

from chexretrieve.store import open_store

REPO = Path(__file__).resolve().parents[2]
N_GOOD = 90
KILLS = 5
MAX_ATTEMPTS = 10  # a run may finish or die before its kill; it then does not count
SEED = 99_2026
ENCODER = "stand-in:30"
ENCODER_ID = "stand-in:d32"
HANG_GUARD_S = 300  # one ingest of the archive takes a few seconds
TABLES = ("studies", "images", "embeddings", "labels", "source_files", "encoders")


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


@dataclass
class KillResumeRun:
    """What happened, for the tests to assert on."""

    n_good: int
    bad_files: int
    kills: int = 0
    moments: list[str] = field(default_factory=list)  # "kind@stored images"
    stored_before_resume: int = 0
    resume_returncode: int = -1
    resume_stderr: str = ""
    resume_counts: dict = field(default_factory=dict)
    count: int = 0
    distinct: tuple = ()  # (distinct SOP UIDs, distinct pixel hashes)
    embeddings: int = 0
    without_embedding: int = -1
    integrity_problems: list = field(default_factory=list)
    sqlite_check: list = field(default_factory=list)
    run_statuses: list[str] = field(default_factory=list)  # oldest first
    # (overlap_encoder, prefetch_batches) of each recorded run: the runs killed were pipelined
    pipelines: list[tuple] = field(default_factory=list)
    tables_after_resume: dict = field(default_factory=dict)
    again_returncode: int = -1
    again_counts: dict = field(default_factory=dict)
    tables_after_again: dict = field(default_factory=dict)
    orphans: list[int] = field(default_factory=list)  # decoding processes still alive


def _command(archive: Path, db: Path, report: Path | None = None) -> list[str]:
    command = [
        sys.executable, "-m", "chexretrieve", "ingest", str(archive), "--db", f"sqlite:///{db}",
        "--encoder", ENCODER, "--batch-size", "4", "--workers", "1", "--no-progress",
    ]  # fmt: skip
    return command + (["--report", str(report)] if report else [])


def _kill_at_random_moments(archive: Path, db: Path, env: dict, run: KillResumeRun) -> set[int]:
    rng = random.Random(SEED)
    leftovers: set[int] = set()
    for _attempt in range(MAX_ATTEMPTS):
        if run.kills == KILLS:
            break
        process = subprocess.Popen(
            _command(archive, db), cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        moment = rng.choice(["start-up", "after-commit", "inside-batch"])
        if moment == "start-up":
            time.sleep(rng.uniform(0.2, 2.5))
        else:
            target = min(N_GOOD - 1, stored_images(db) + rng.randint(1, 10))
            deadline = time.monotonic() + HANG_GUARD_S
            while process.poll() is None and time.monotonic() < deadline:
                if stored_images(db) >= target:
                    break
                time.sleep(0.005)
            if moment == "inside-batch":
                time.sleep(rng.uniform(0.0, 0.15))
        if process.poll() is None:
            leftovers |= descendants(process.pid)
            os.kill(process.pid, signal.SIGKILL)
            run.kills += 1
            run.moments.append(f"{moment}@{stored_images(db)}")
        process.wait(HANG_GUARD_S)
    return leftovers


def run_kill_resume(folder: Path) -> KillResumeRun:
    archive = folder / "archive"
    write_archive(archive, N_GOOD, size=32)
    bad = write_bad_files(archive / "bad")
    db = folder / "store.sqlite"
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1"}
    run = KillResumeRun(n_good=N_GOOD, bad_files=len(bad))
    leftovers = _kill_at_random_moments(archive, db, env, run)
    run.stored_before_resume = stored_images(db)
    if run.kills < KILLS:
        return run  # the tests report it; resuming would prove nothing

    report_path = folder / "resume.json"
    finished = subprocess.run(_command(archive, db, report_path), cwd=REPO, env=env,
                              capture_output=True, timeout=HANG_GUARD_S)  # fmt: skip
    run.resume_returncode = finished.returncode
    run.resume_stderr = finished.stderr.decode()[-2000:]
    if finished.returncode != 0:
        return run
    run.resume_counts = json.loads(report_path.read_text())["counts"]
    with open_store(f"sqlite:///{db}") as store:
        run.count = store.count_images()
        run.distinct = tuple(
            store.execute_readonly_sql(
                "SELECT COUNT(DISTINCT sop_uid), COUNT(DISTINCT pixel_sha256) FROM images"
            )[0]
        )
        run.embeddings = store.count_embeddings(ENCODER_ID)
        run.without_embedding = store.execute_readonly_sql(
            "SELECT COUNT(*) FROM images i WHERE NOT EXISTS "
            "(SELECT 1 FROM embeddings e WHERE e.image_id = i.id)"
        )[0][0]
        run.integrity_problems = store.integrity_check()
        run.sqlite_check = store.execute_readonly_sql("PRAGMA integrity_check")
        run.run_statuses = store.runs_frame().status.tolist()
        run.pipelines = [
            (settings.get("overlap_encoder"), settings.get("prefetch_batches"))
            for (text,) in store.execute_readonly_sql("SELECT settings_json FROM ingest_runs")
            for settings in [json.loads(text or "{}")]
        ]
        run.tables_after_resume = store.table_counts()

    again = subprocess.run(_command(archive, db, report_path), cwd=REPO, env=env,
                           capture_output=True, timeout=HANG_GUARD_S)  # fmt: skip
    run.again_returncode = again.returncode
    if again.returncode == 0:
        run.again_counts = json.loads(report_path.read_text())["counts"]
    with open_store(f"sqlite:///{db}") as store:
        run.tables_after_again = store.table_counts()

    # the decoding processes of killed runs exit on their own (their parent's pipes closed)
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in leftovers) and time.monotonic() < deadline:
        time.sleep(0.1)
    run.orphans = sorted(pid for pid in leftovers if alive(pid))
    return run
