"""Read files with ``read_radiograph`` in a fresh process and print one JSON line per file.

Usage: ``python adv_probe.py [--address-space-mb N] FILE...``. Each line holds the outcome
(``read`` or the rejection reason), wall and CPU seconds, the peak resident memory while reading
the file above the memory resident before it (Linux VmHWM, reset per file through
``/proc/self/clear_refs``), and the tracemalloc peak of Python-visible allocations. A file that
kills the process (a codec crash) leaves its ``start`` line without a result line.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import tracemalloc
from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def probe(path: str, read_radiograph, rejected_type) -> dict:  # noqa: ANN001
    resettable = _reset_peak()
    before = _status_kib("VmRSS") * 1024
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = usage.ru_utime + usage.ru_stime
    wall_before = time.perf_counter()
    tracemalloc.start()
    try:
        radiograph = read_radiograph(path)
        outcome, message = "read", f"{radiograph.pixels.shape}"
    except rejected_type as exc:
        outcome, message = exc.reason, exc.message
    except Exception as exc:  # noqa: BLE001 - reported as a crash by the test
        outcome, message = "crash", f"{type(exc).__name__}: {exc}"
    finally:
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = _status_kib("VmHWM") * 1024
    return {
        "file": path,
        "outcome": outcome,
        "message": message[:300],
        "wall_s": time.perf_counter() - wall_before,
        "cpu_s": usage.ru_utime + usage.ru_stime - cpu_before,
        "rss_before": before,
        "rss_peak_above_before": max(0, peak - before) if resettable else None,
        "traced_peak": traced_peak,
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["--address-space-mb"]:
        limit = int(argv[1]) << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        argv = argv[2:]
    from chexretrieve.dicom import RejectedFile, read_radiograph

    for path in argv:
        print(json.dumps({"start": path}), flush=True)
        print(json.dumps(probe(path, read_radiograph, RejectedFile)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
