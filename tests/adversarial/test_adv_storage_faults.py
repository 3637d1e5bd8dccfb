"""Disk full and a read-only database in the middle of an ingest: a clear stop, committed rows
intact, and a later run resumes.

Disk full is real where the suite may mount (root): the database lives on a 16 MiB tmpfs that a
filler file leaves 400 kB of. Elsewhere, and as a second case everywhere, the ingest process gets
a file-size limit (RLIMIT_FSIZE) 400 kB above the database's size, so its writes fail with EFBIG.
Read-only: after a few batches every SQLite connection of the running ingest is switched to
``PRAGMA query_only`` (SQLite then refuses writes exactly as on a read-only file).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from adv_faults import (
    free_bytes,
    make_read_only,
    mount_tmpfs,
    tracked_sqlite_connections,
    unmount,
)
from adv_support import REPO
from ingest_fixtures import write_archive

from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, IngestError, ingest_paths
from chexretrieve.store import open_store

N_IMAGES = 150
HEADROOM = 400_000


def _ingest_cli(archive, db, report, limit_bytes=None):  # noqa: ANN001, ANN202
    command = [
        sys.executable, "-m", "chexretrieve", "ingest", str(archive), "--db", f"sqlite:///{db}",
        "--encoder", "stand-in:0:2048", "--batch-size", "8", "--workers", "1", "--no-progress",
        "--report", str(report),
    ]  # fmt: skip

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1", "COLUMNS": "200"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit if limit_bytes else None)  # fmt: skip


@pytest.mark.parametrize("wanted", ["tmpfs", "file-size-limit"])
def test_disk_full_mid_ingest_stops_clearly_and_resumes(tmp_path, cases, wanted):
    archive = tmp_path / "archive"
    write_archive(archive, N_IMAGES, size=32)
    disk = tmp_path / "disk"
    mode = "tmpfs" if wanted == "tmpfs" and mount_tmpfs(disk, "16m") else "file-size-limit"
    disk.mkdir(exist_ok=True)
    db = disk / "store.sqlite"
    report_path = tmp_path / "partial.json"
    try:
        open_store(f"sqlite:///{db}").close()  # migrated while there is room
        limit = None
        if mode == "tmpfs":
            (disk / "filler").write_bytes(bytes(free_bytes(disk) - HEADROOM))
        else:
            limit = db.stat().st_size + HEADROOM
        stopped = _ingest_cli(archive, db, report_path, limit)
        output = stopped.stdout + stopped.stderr
        partial = json.loads(report_path.read_text())["counts"] if report_path.exists() else {}
        clear = stopped.returncode == 2 and "committed batches are kept" in output and (
            "full" in output or "I/O" in output
        )  # fmt: skip
        cases.check(f"{mode}: clear stop (exit 2, says full / I/O error)", clear, output[-400:])
        if mode == "tmpfs":
            (disk / "filler").unlink()
        with open_store(f"sqlite:///{db}") as store:
            kept, problems = store.count_images(), store.integrity_check()
        committed = partial.get("ingested", -1)
        intact = 0 < kept < N_IMAGES and kept == committed and problems == []
        cases.check(f"{mode}: committed rows intact", intact, f"{kept} vs {partial}, {problems}")
        with open_store(f"sqlite:///{db}") as store:  # resume and re-run in-process
            encoder = StandInEncoder(dim=2048)
            config = IngestConfig(workers=1, batch_size=8)
            resumed = ingest_paths([archive], store, encoder, config)
            final, problems = store.count_images(), store.integrity_check()
            again = ingest_paths([archive], store, encoder, config)
        resumes = resumed.status == "completed" and final == N_IMAGES and problems == []
        resumes = resumes and resumed.counts["ingested"] == N_IMAGES - kept
        cases.check(f"{mode}: resumes once there is room", resumes,
                    f"{resumed.counts}, {problems}")  # fmt: skip
        idle = again.counts["already-present"] == N_IMAGES and again.counts["ingested"] == 0
        cases.check(f"{mode}: a further run changes nothing", idle, str(again.counts))
        cases.figure(f"{mode} rows kept at the stop", kept)
    finally:
        if mode == "tmpfs":
            unmount(disk)
    assert clear, output[-2000:]
    assert intact and resumes and idle


def test_read_only_database_mid_ingest_stops_clearly_and_resumes(tmp_path, cases):
    archive = tmp_path / "archive"
    write_archive(archive, 40, size=32)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    encoder = StandInEncoder(dim=16)
    config = IngestConfig(workers=1, batch_size=4)
    with tracked_sqlite_connections() as connections:
        store = open_store(url)

        def turn_read_only(done: int, total: int) -> None:
            if done >= 12:
                make_read_only(connections)

        try:
            with pytest.raises(IngestError) as stop:
                ingest_paths([archive], store, encoder, config, progress=turn_read_only)
        finally:
            store.close()
    message = str(stop.value)
    clear = "readonly database" in message and "run again to resume" in message
    cases.check("clear stop on a read-only database", clear, message[:300])
    partial = stop.value.report.counts["ingested"]
    with open_store(url) as store:
        kept, problems = store.count_images(), store.integrity_check()
        report = ingest_paths([archive], store, encoder, config)
        final = store.count_images()
        again = ingest_paths([archive], store, encoder, config)
    intact = kept == partial == 12 and problems == []
    cases.check("committed rows intact", intact, f"{kept} / {partial} / {problems}")
    resumes = report.status == "completed" and final == 40 and report.counts["ingested"] == 28
    cases.check("resumes on a writable database", resumes, str(report.counts))
    idle = again.counts["already-present"] == 40 and again.counts["ingested"] == 0
    cases.check("a further run changes nothing", idle, str(again.counts))
    assert clear and intact and resumes and idle
