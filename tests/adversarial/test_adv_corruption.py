"""1,000 seeded byte corruptions of real files: every one read or rejected with a reason, no crash.

Sources: RG1 (a real CR chest radiograph, uncompressed and JPEG 2000), four phantom radiographs
(explicit, deflate, RLE, JPEG 2000) and pydicom's sample files of many transfer syntaxes and
kinds. The cases run through ``read_radiograph`` in a separate process (a codec segfault would be
caught and named), and a subset runs through the real ingest pipeline, whose decoding workers
enforce the per-file timeout.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import adv_corruption as corruption
import numpy as np
from adv_readers import hostile_reader
from adv_support import require

from chexretrieve.dicom import REJECTION_REASONS, ReadConfig, pydicom_test_file
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

HERE = Path(__file__).resolve().parent
SEED = 20261129
N_CASES = 1000
#: (pydicom sample, cases); the large RG1 files get header-side strategies (cheap failures)
LARGE = (("RG1_UNCI.dcm", 40), ("RG1_J2KI.dcm", 10))
SMALL = (
    "CT_small.dcm",
    "MR_small.dcm",
    "MR_small_RLE.dcm",
    "image_dfl.dcm",
    "JPEG2000.dcm",
    "MR_small_jp2klossless.dcm",
    "JPEG-LL.dcm",
    "MR_small_bigendian.dcm",
    "MR_small_implicit.dcm",
    "JPEG-lossy.dcm",
    "693_J2KR.dcm",
    "no_meta.dcm",
    "ExplVR_BigEnd.dcm",
    "emri_small.dcm",
    "SC_rgb.dcm",
    "rtplan.dcm",
    "liver.dcm",
)
PER_PHANTOM = 60
CASE_CPU_LIMIT_S = 10.0  # a hang detector, not a speed goal
INGEST_SUBSET_EVERY = 10


def sample(name: str) -> Path:
    try:
        return pydicom_test_file(name)
    except ValueError:
        require(False, f"pydicom-data sample {name}")
        raise


def build_plan(phantoms: list[Path]) -> dict:
    rng = np.random.default_rng(SEED)
    cases: list[tuple[str, str]] = []
    for name, count in LARGE:
        cases += [(str(sample(name)), str(rng.choice(["header", "truncate", "length", "splice"])))
                  for _ in range(count)]  # fmt: skip
    for path in phantoms:
        cases += [(str(path), str(rng.choice(corruption.STRATEGIES))) for _ in range(PER_PHANTOM)]
    small = [str(sample(name)) for name in SMALL]
    for i in range(N_CASES - len(cases)):
        cases.append((small[i % len(small)], str(rng.choice(corruption.STRATEGIES))))
    return {
        "seed": SEED,
        "cases": [{"index": i, "source": s, "strategy": k} for i, (s, k) in enumerate(cases)],
    }


def run_cases(plan: dict, folder: Path) -> dict[int, dict]:
    """Every case's result; a case that killed the runner is a 'crash' and the rest go on."""
    plan_path = folder / "plan.json"
    plan_path.write_text(json.dumps(plan))
    out = folder / "results.jsonl"
    results: dict[int, dict] = {}
    start = 0
    while start < len(plan["cases"]):
        done = subprocess.run(
            [sys.executable, str(HERE / "adv_corruption.py"), str(plan_path), str(out), str(start)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        started = None
        for line in out.read_text().splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["index"]] = record
                started = None
        if done.returncode == 0 and started is None:
            break
        crashed = started if started is not None else start
        results[crashed] = {
            "index": crashed,
            "outcome": "crash",
            "message": f"runner died (exit {done.returncode}): {done.stderr[-500:]}",
        }
        start = crashed + 1
        with out.open("a") as handle:
            handle.write(json.dumps(results[crashed]) + "\n")
    return results


def test_1000_seeded_corruptions_are_read_or_rejected_with_a_reason(
    tmp_path, phantom_dicoms, cases
):
    plan = build_plan(phantom_dicoms)
    results = run_cases(plan, tmp_path)
    outcomes: collections.Counter[str] = collections.Counter()
    worst_cpu = 0.0
    for case in plan["cases"]:
        got = results.get(case["index"], {"outcome": "missing"})
        label = got.get("reason", got["outcome"])
        outcomes[label] += 1
        worst_cpu = max(worst_cpu, got.get("cpu_s", 0.0))
        ok = (got["outcome"] == "read" or (
            got["outcome"] == "rejected" and got.get("reason") in REJECTION_REASONS
            and bool(got.get("message"))
        )) and got.get("cpu_s", 0.0) < CASE_CPU_LIMIT_S  # fmt: skip
        name = f"case {case['index']} {Path(case['source']).name} {case['strategy']}"
        cases.check(name, ok, json.dumps(got)[:300])
    cases.figure("cases", len(plan["cases"]))
    cases.figure("read", outcomes["read"])
    cases.figure("rejected", sum(v for k, v in outcomes.items() if k in REJECTION_REASONS))
    cases.figure("crashes", outcomes["crash"] + outcomes["missing"] + outcomes["insane-pixels"])
    cases.figure("max CPU s per file", round(worst_cpu, 3))
    assert len(results) == N_CASES
    assert outcomes["crash"] == outcomes["missing"] == outcomes["insane-pixels"] == 0, outcomes
    assert worst_cpu < CASE_CPU_LIMIT_S
    assert outcomes["read"] > 50 and len(outcomes) >= 6, outcomes  # the mix really varies


def test_a_corrupted_subset_through_ingest_with_per_file_timeouts(tmp_path, phantom_dicoms, cases):
    plan = build_plan(phantom_dicoms)
    folder = tmp_path / "archive"
    folder.mkdir()
    chosen = [c for c in plan["cases"] if "RG1" not in c["source"]][::INGEST_SUBSET_EVERY]
    for case in chosen:
        data = corruption.case_bytes(SEED, case["index"], case["source"], case["strategy"])
        (folder / f"case{case['index']:04d}.dcm").write_bytes(data)
    good = phantom_dicoms[0]
    shutil.copy(good, folder / "hang_decoder.dcm")
    shutil.copy(good, folder / "segv_decoder.dcm")
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    config = IngestConfig(workers=1, batch_size=8, file_timeout_s=5.0)
    try:
        report = ingest_paths([folder], store, StandInEncoder(dim=16), config,
                              read_config=ReadConfig(allowed_modalities=None),
                              reader=hostile_reader)  # fmt: skip
        stored, integrity = store.count_images(), store.integrity_check()
    finally:
        store.close()
    by_name = {Path(o.path).name: o for o in report.outcomes}
    for name in sorted(p.name for p in folder.iterdir()):
        outcome = by_name.get(name)
        ok = outcome is not None and (
            outcome.outcome in ("ingested", "already-present")
            or (outcome.outcome in ("rejected", "conflict") and bool(outcome.reason))
        )
        cases.check(f"ingest {name}", ok, str(outcome))
    hang, segv = by_name["hang_decoder.dcm"], by_name["segv_decoder.dcm"]
    cases.check(
        "hanging decode stopped by the per-file timeout", hang.reason == "timeout", str(hang)
    )
    cases.check("segfaulting decode rejected alone", segv.reason == "worker-crash", str(segv))
    cases.figure("ingest subset files", len(by_name))
    cases.figure("file timeout s", config.file_timeout_s)
    assert report.status == "completed" and len(report.outcomes) == len(chosen) + 2
    assert hang.outcome == "rejected" and hang.reason == "timeout"
    assert segv.outcome == "rejected" and segv.reason == "worker-crash"
    assert all(o.reason for o in report.outcomes if o.outcome in ("rejected", "conflict"))
    assert stored == report.counts["ingested"] and integrity == []
