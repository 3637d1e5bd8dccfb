"""Decompression bombs and lying headers: rejected fast, with bounded memory, the run goes on.

Measured in a fresh process (``adv_probe.py``) per batch of files: CPU seconds, the rise of the
resident-memory peak (VmHWM) while reading each file, and the tracemalloc peak. The process runs
under a 2 GiB address-space cap so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import adv_crafting as craft
import pytest
from adv_readers import hostile_reader

from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CPU_LIMIT_S = 1.0
MEMORY_LIMIT_BYTES = 64 << 20
WORKER_CAP_MB = 256


def bomb_files(folder: Path) -> dict[str, tuple[Path, str]]:
    """{case: (file, expected outcome)}"""
    folder.mkdir(parents=True, exist_ok=True)
    gib = craft.GiB
    return {
        "65535^2 native": (craft.lying_size_header(folder, "huge_native.dcm"), "too-large"),
        "65535^2 RLE": (craft.lying_size_header(folder, "huge_rle.dcm", "rle"), "too-large"),
        "100k frames native": (craft.many_frames(folder, "frames_native.dcm"), "multi-frame"),
        "100k frames RLE": (craft.many_frames(folder, "frames_rle.dcm", syntax="rle"),
                            "multi-frame"),
        "deflate 2 GiB pixels": (
            craft.deflate_bomb(folder, "deflate_pixels.dcm", 2 * gib, hide="pixels"),
            "too-large",
        ),
        "deflate 3 GiB private": (
            craft.deflate_bomb(folder, "deflate_private.dcm", 3 * gib, hide="private"),
            "too-large",
        ),
        "deflate 1 GiB in 1 MiB parts": (
            craft.deflate_bomb(folder, "deflate_split.dcm", gib, hide="split"),
            "too-large",
        ),
        "deflate 3 GiB unparsed": (
            craft.deflate_bomb(folder, "deflate_unparsed.dcm", 3 * gib, hide="unparsed"),
            "too-large",
        ),
        "honest deflate": (craft.honest_deflate(folder, "honest_deflate.dcm"), "read"),
        "honest RLE": (craft.write_small_radiograph(folder / "honest_rle.dcm", 6, syntax="rle"),
                       "read"),
    }  # fmt: skip


def run_probe(files: list[Path], address_space_mb: int = 2048) -> dict[str, dict]:
    command = [sys.executable, str(HERE / "adv_probe.py"), "--address-space-mb",
               str(address_space_mb), *map(str, files)]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    results = {}
    for line in done.stdout.splitlines():
        record = json.loads(line)
        if "outcome" in record:
            results[record["file"]] = record
    missing = [str(f) for f in files if str(f) not in results]
    assert not missing, f"the probe died on {missing[:1]}: {done.stderr[-2000:]}"
    return results


def test_bombs_are_rejected_in_under_a_cpu_second_with_bounded_memory(tmp_path, cases):
    files = bomb_files(tmp_path / "bombs")
    results = run_probe([path for path, _ in files.values()])
    worst_cpu = worst_rss = worst_traced = 0.0
    for name, (path, expected) in files.items():
        got = results[str(path)]
        rss = got["rss_peak_above_before"] or 0
        ok = (
            got["outcome"] == expected
            and got["cpu_s"] < CPU_LIMIT_S
            and rss < MEMORY_LIMIT_BYTES
            and got["traced_peak"] < MEMORY_LIMIT_BYTES
        )
        cases.check(name, ok, json.dumps(got))
        if expected != "read":
            worst_cpu = max(worst_cpu, got["cpu_s"])
            worst_rss = max(worst_rss, rss)
            worst_traced = max(worst_traced, got["traced_peak"])
    cases.figure("bombs", sum(1 for _, e in files.values() if e != "read"))
    cases.figure("max CPU s", round(worst_cpu, 3))
    cases.figure("max RSS rise bytes", int(worst_rss))
    cases.figure("max traced bytes", int(worst_traced))
    for name, (path, expected) in files.items():
        got = results[str(path)]
        assert got["outcome"] == expected, (name, got)
        assert got["cpu_s"] < CPU_LIMIT_S, (name, got)
        assert (got["rss_peak_above_before"] or 0) < MEMORY_LIMIT_BYTES, (name, got)
        assert got["traced_peak"] < MEMORY_LIMIT_BYTES, (name, got)
    assert (
        "deflate-compressed dataset too large once inflated"
        in (results[str(files["deflate 3 GiB private"][0])]["message"])
    )


def test_ingest_rejects_every_bomb_under_a_worker_memory_cap_and_goes_on(tmp_path, cases):
    archive = tmp_path / "archive"
    files = bomb_files(archive / "bombs")
    good = [craft.write_small_radiograph(archive / "good" / f"g{i}.dcm", 100 + i) for i in range(6)]
    hog = craft.write_small_radiograph(archive / "hog_decoder.dcm", 200)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    config = IngestConfig(workers=1, batch_size=4, file_timeout_s=60.0,
                          worker_memory_mb=WORKER_CAP_MB)  # fmt: skip
    try:
        report = ingest_paths([archive], store, StandInEncoder(dim=16), config,
                              reader=hostile_reader)  # fmt: skip
        stored = store.count_images()
        integrity = store.integrity_check()
    finally:
        store.close()
    outcomes = {Path(o.path).name: o for o in report.outcomes}
    expected = {
        path.name: ("ingested" if want == "read" else want) for path, want in files.values()
    }
    expected.update({p.name: "ingested" for p in good})
    expected[hog.name] = "too-large"  # the 1 GiB allocation hits the 256 MiB cap
    for name, want in expected.items():
        outcome = outcomes.get(name)
        got = None if outcome is None else (outcome.reason or outcome.outcome)
        cases.check(f"ingest {name}", got == want, f"got {got}: {outcome}")
    cases.figure("worker cap MiB", WORKER_CAP_MB)
    assert report.status == "completed"
    assert {name: (o.reason or o.outcome) for name, o in outcomes.items()} == expected
    assert stored == len(good) + 2 and integrity == []  # + the honest deflate and RLE files
    assert report.worker_restarts == 0  # rejected inside the worker: nothing crashed


@pytest.mark.parametrize("cap_mb", [0, WORKER_CAP_MB])
def test_reader_process_alone_never_needs_more_than_the_cap(tmp_path, cap_mb, cases):
    """The same bombs read in one process whose whole address space is capped at 256 MiB (0:
    uncapped): the outcomes do not depend on the cap, so memory stayed under it."""
    files = bomb_files(tmp_path / "bombs")
    results = run_probe([p for p, _ in files.values()], address_space_mb=cap_mb or 1 << 20)
    for name, (path, expected) in files.items():
        got = results[str(path)]["outcome"]
        cases.check(f"{name} (cap {cap_mb or 'none'})", got == expected, got)
        assert got == expected, (name, results[str(path)])
