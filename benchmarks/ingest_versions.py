"""The same ingest command run by two versions of the code, alternately: wall time and CPU time.

    .venv/bin/python benchmarks/ingest_versions.py --base 1f23b76 --archive data/demo/phantom \
        [--rounds 2] [--workers -1] [--json FILE]

``--base`` is any git revision: its ``chexretrieve`` package is extracted (``git archive``) into a
temporary folder and run with this virtual environment (PYTHONPATH first), against the working
tree's package. Each round ingests ``--archive`` plus RG1 (with the archive's labels.csv when
present, as ``chexretrieve demo`` does) into a fresh SQLite store with ``chexretrieve ingest
--encoder phantom``, base then current. Reported per run: wall seconds, files/s, and the CPU
seconds of the whole process tree (decoding workers included: /proc read every 0.25 s, the last
reading of each process; the main process apart), which holds on a machine shared with other work
when wall time does not; the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def extract(revision: str, folder: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", revision, "chexretrieve", "db"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def one_run(code: Path, paths: list[str], labels: Path | None, db: Path, workers: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "chexretrieve", "ingest", *paths, "--db", f"sqlite:///{db}",
               "--encoder", "phantom", "--workers", str(workers), "--no-progress"]  # fmt: skip
    if labels is not None:
        command += ["--labels", str(labels)]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=code, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen: dict[int, float] = {}
    while process.poll() is None:  # CPU seconds of every process of the tree, last reading
        for pid in [process.pid, *descendants(process.pid)]:
            seconds = cpu_seconds(pid)
            if seconds is not None:
                seen[pid] = max(seconds, seen.get(pid, 0.0))
        time.sleep(0.25)
    wall = time.perf_counter() - started
    stderr = process.stderr.read() if process.stderr else ""
    if process.returncode != 0:
        raise SystemExit(f"ingest failed ({code}):\n{stderr[-3000:]}")
    return {"wall_s": round(wall, 1), "cpu_s": round(sum(seen.values()), 1),
            "cpu_s_main_process": round(seen.get(process.pid, 0.0), 1),
            "load_average_1min": f"{load:.1f} -> {os.getloadavg()[0]:.1f}"}  # fmt: skip


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process from /proc (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--archive", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=-1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from chexretrieve.dicom import pydicom_test_file

    archive = args.archive.resolve()
    paths = [str(archive), str(pydicom_test_file("RG1_UNCI.dcm"))]
    labels = archive / "labels.csv" if (archive / "labels.csv").is_file() else None
    files = sum(1 for _ in archive.rglob("*.dcm")) + 1
    runs: dict[str, list[dict]] = {"base": [], "current": []}
    with tempfile.TemporaryDirectory(prefix="ingest-versions-") as tmp:
        base = extract(args.base, Path(tmp) / "base")
        for round_ in range(args.rounds):
            for name, code in (("base", base), ("current", REPO)):
                db = Path(tmp) / f"{name}-{round_}.sqlite"
                result = one_run(code, paths, labels, db, args.workers)
                result["files_per_s"] = round(files / result["wall_s"], 1)
                runs[name].append(result)
                print(name, round_, json.dumps(result), flush=True)
    summary = {}
    for name, results in runs.items():
        summary[name] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in results),
            "cpu_s_median": statistics.median(r["cpu_s"] for r in results),
        }
    speedup_wall = summary["base"]["wall_s_median"] / summary["current"]["wall_s_median"]
    speedup_cpu = summary["base"]["cpu_s_median"] / summary["current"]["cpu_s_median"]
    figures = {"base": args.base, "archive": str(archive), "files": files, "runs": runs,
               "summary": summary, "speedup_wall": round(speedup_wall, 2),
               "speedup_cpu": round(speedup_cpu, 2), "cpu_count": os.cpu_count()}  # fmt: skip
    print(json.dumps(figures["summary"]))
    print(
        f"current vs {args.base}: {speedup_wall:.2f}x in wall time, {speedup_cpu:.2f}x in CPU time"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
