"""Phantom generation speed: in-memory `generate_case` and full `phantom make` (with DICOM).

    .venv/bin/python benchmarks/phantom_generate.py [--n 400] [--size 320] [--workers 2]

Prints images per second (wall clock) for one process and for `--workers` processes, the ratio
to the issue's goal of 200 images/s at 320 px on 2 cores, and the CPU seconds per image of all
processes together: `workers / cpu_per_image` is what `workers` otherwise idle cores deliver, so
that figure stays meaningful when other jobs share the machine (the load average is printed).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from chexretrieve.phantom import PhantomConfig, generate_case
from chexretrieve.phantom.archive import write_archive
from chexretrieve.phantom.config import ArchiveConfig

GOAL = 200.0


def _chunk(args: tuple[int, int, int, PhantomConfig]) -> int:
    seed, start, stop, config = args
    for index in range(start, stop):
        generate_case(seed, index, config)
    return stop - start


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def in_memory(n: int, config: PhantomConfig, workers: int) -> tuple[float, float]:
    generate_case(0, 0, config)  # build the cached texture banks before forking
    bounds = [(0, i * n // workers, (i + 1) * n // workers, config) for i in range(workers)]
    start, cpu = time.perf_counter(), _cpu_seconds()
    if workers == 1:
        _chunk(bounds[0])
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            pool.map(_chunk, bounds)
    return n / (time.perf_counter() - start), (_cpu_seconds() - cpu) / n


def full_make(n: int, config: PhantomConfig, workers: int) -> tuple[float, float]:
    folder = Path(tempfile.mkdtemp(prefix="phantom-bench-"))
    try:
        start, cpu = time.perf_counter(), _cpu_seconds()
        write_archive(folder / "out", ArchiveConfig(n=n, seed=0, workers=workers), config)
        return n / (time.perf_counter() - start), (_cpu_seconds() - cpu) / n
    finally:
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    config = PhantomConfig(size=args.size)
    load = os.getloadavg()[0]
    print(f"phantom generation, {args.n} images at {args.size} px (load average {load:.1f})")
    for label, run in (
        ("generate_case (in memory)", in_memory),
        ("phantom make (DICOM)", full_make),
    ):
        for workers in sorted({1, args.workers}):
            rate, cpu = run(args.n, config, workers)
            idle = workers / cpu
            print(
                f"  {label:26s} {workers} process{'es' if workers > 1 else '  '}: "
                f"{rate:6.1f} images/s wall ({rate / GOAL:.2f} x goal); "
                f"{cpu * 1000:5.1f} ms CPU/image -> {idle:6.1f} images/s on {workers} idle "
                f"core{'s' if workers > 1 else ''} ({idle / GOAL:.2f} x goal)"
            )


if __name__ == "__main__":
    main()
