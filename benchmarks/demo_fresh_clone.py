"""How long `make demo` takes from a fresh clone to the page answering, and where the time goes.

    .venv/bin/python benchmarks/demo_fresh_clone.py [--commit HEAD] [--work DIR] [--keep]

Clones this repository at ``--commit`` into a scratch folder (nothing of this checkout is reused:
no .venv, no data/, no caches; the clone's caches and keys live inside it), runs
``make demo PORT=<free port>`` there, stamps every line the command prints with the seconds since
the start, and polls the page's address until it answers with the case lookup (HTTP 200, the
page's title). Then the demo is stopped (its whole process group) and a table of phases is
printed: each phase starts at a line the demo prints (setup steps, archive, ingest, density, the
server) and ends where the next begins; "page" is the moment the address answered. The load
average (1 minute) is printed at the start and at the end: the machine is shared, so every
figure is read beside it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the tests' free-port helper
from net_ports import free_port  # noqa: E402

#: the milestones, each named by the first printed line that matches its pattern; a phase runs
#: from its milestone to the next one printed (old and new `make demo` print different lines)
PHASES = (
    ("setup: virtual environment and pip", r"^setup 1/[34]"),
    ("setup: torch (CPU wheel)", r"^setup 2/[34]"),
    ("setup: chexretrieve and its dependencies", r"^setup 3/[34]"),
    ("setup: open_clip (tests' reference)", r"^setup 4/4"),
    ("setup: OHIF viewer", r"^setup: installing the OHIF"),
    ("demo: start (imports, encoder)", r"-m chexretrieve demo"),
    ("demo: phantom archive", r"^phantom archive"),
    ("demo: first part ingested", r"^ingested \d[\d,]* of"),
    ("demo: anchors embedded", r"^anchors:"),
    ("demo: page served", r"^page:"),
    ("demo: archive ingested", r"^ingest run|^phantom archive complete"),
    ("demo: archive density", r"^density"),
    ("demo: ready", r"^ready in"),
)
TIMEOUT_S = 1800  # a hang guard


def session_cpu_seconds(session: int) -> float:
    """CPU seconds (user + system) used so far by the processes of ``session``: each live one's
    own, plus what its finished children used (a process counts its children once it has
    reaped them: pip runs under make, the generator's workers under the demo). Less sensitive
    to the machine's load than the wall time (a shared machine)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == session:  # the fields after "(comm)": state, ppid, pgrp, session
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def _page_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            return response.status == 200 and b"chexretrieve" in response.read(1 << 20)
    except OSError:
        return False


def _phases(lines: list[tuple[float, str]], page_at: float | None) -> list[tuple[str, float]]:
    """(milestone, seconds) in time order; each pattern is taken at its first match."""
    found: dict[str, float] = {}
    for at, line in lines:
        for name, pattern in PHASES:
            if name not in found and re.search(pattern, line.strip()):
                found[name] = at
                break
    if page_at is not None:
        found["page answers (polled)"] = page_at
    return sorted(found.items(), key=lambda item: item[1])


def run(commit: str, work: Path) -> int:
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    port = free_port()
    env = dict(os.environ)
    for key in [k for k in env if k.startswith(("CHEXRETRIEVE_", "VIRTUAL_ENV"))]:
        env.pop(key)
    env.update(
        CHEXRETRIEVE_CACHE=str(clone / ".cache" / "chexretrieve"),
        XDG_CONFIG_HOME=str(clone / ".cache" / "config"),
        CHEXRETRIEVE_AUDIT_LOG=str(clone / ".cache" / "audit.jsonl"),
        PYTHONUNBUFFERED="1",
        COLUMNS="120",
    )
    url = f"http://127.0.0.1:{port}/"
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(
        ["make", "demo", f"PORT={port}"], cwd=clone, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            at = time.perf_counter() - started
            lines.append((at, line.rstrip()))
            print(f"[{at:7.1f} s] {line.rstrip()}", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    page_at = None
    cpu = 0.0
    try:
        while time.perf_counter() - started < TIMEOUT_S and process.poll() is None:
            cpu = session_cpu_seconds(process.pid)  # just before: the demo is still running
            if _page_answers(url):
                page_at = time.perf_counter() - started
                break
            time.sleep(0.5)
        # then until the demo has finished its work (the rest of the archive, the density)
        while time.perf_counter() - started < TIMEOUT_S and process.poll() is None:
            if any(line.startswith(("ready in", "case lookup on")) for _, line in lines):
                break
            time.sleep(0.5)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        reader.join(timeout=10)
    load_end = os.getloadavg()[0]
    printed_address = any(url.rstrip("/") in line for _, line in lines)
    print(f"\ncommit {commit}: make demo on a fresh clone (load average {load_start:.2f} at the "
          f"start, {load_end:.2f} at the end; {os.cpu_count()} cores)")  # fmt: skip
    phases = _phases(lines, page_at)
    for (name, at), following in zip(phases, [*phases[1:], None], strict=True):
        took = "" if following is None else f"{following[1] - at:7.1f} s"
        print(f"  {at:7.1f} s  {name:<44} {took}")
    if page_at is None:
        print(f"  the page never answered (exit code {process.returncode})")
        return 1
    said = "yes" if printed_address else "no"
    print(f"page answered after {page_at:.1f} s ({cpu:.0f} CPU seconds of make demo's processes "
          f"by then); the demo printed the page's address: {said}")  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commit", default="HEAD", help="the commit to clone (default HEAD)")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the clone afterwards")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", args.commit], capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    work = Path(args.work or tempfile.mkdtemp(prefix="demo-fresh-clone-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run(commit, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
