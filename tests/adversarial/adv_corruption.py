"""Seeded byte-level corruptions of real DICOM files, and a runner that reads each one.

A case is (index, source file, strategy); its bytes depend only on the suite seed and the index,
so any case can be rebuilt for a bug report. ``python adv_corruption.py PLAN.json OUT.jsonl START``
reads cases START.. with ``read_radiograph`` and writes a ``start`` line before and a result line
after each, so a case that kills the process is known by its unanswered ``start``.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

STRATEGIES = ("flip", "header", "truncate", "length", "splice", "zero")
_VRS = (
    b"AE",
    b"AS",
    b"CS",
    b"DA",
    b"DS",
    b"DT",
    b"IS",
    b"LO",
    b"LT",
    b"OB",
    b"OW",
    b"PN",
    b"SH",
    b"SQ",
    b"ST",
    b"TM",
    b"UI",
    b"UL",
    b"US",
    b"UN",
    b"UT",
    b"FD",
    b"FL",
    b"SS",
)
_LONG = (b"OB", b"OW", b"SQ", b"UN", b"UT")
_PIXEL_TAG = b"\xe0\x7f\x10\x00"


def header_end(data: bytes) -> int:
    found = data.rfind(_PIXEL_TAG)
    return found if found > 0 else min(len(data), 4096)


def length_fields(data: bytes, end: int) -> list[tuple[int, int]]:
    """(offset, size) of plausible explicit-VR length fields before ``end``."""
    fields = []
    for vr in _VRS:
        start = 132
        while (position := data.find(vr, start, end)) >= 0:
            start = position + 1
            if vr in _LONG:
                fields.append((position + 4, 4))
            else:
                fields.append((position + 2, 2))
    return sorted(fields)


def corrupt(data: bytes, rng: np.random.Generator, strategy: str) -> bytes:
    out = bytearray(data)
    end = max(1, header_end(data))
    if strategy in ("flip", "header"):
        limit = len(out) if strategy == "flip" else end
        for _ in range(int(rng.integers(1, 9))):
            out[int(rng.integers(0, limit))] = int(rng.integers(0, 256))
    elif strategy == "truncate":
        cut = int(rng.integers(1, len(out)))
        if rng.random() < 0.5:  # mostly inside the header, where parsing is hardest
            cut = int(rng.integers(1, end + 1))
        out = out[:cut]
    elif strategy == "length":
        fields = length_fields(data, end)
        for _ in range(int(rng.integers(1, 4))):
            if not fields:
                break
            offset, size = fields[int(rng.integers(0, len(fields)))]
            top = (1 << (8 * size)) - 1
            value = int(rng.choice([0, 1, 2, top, top - 1, int(rng.integers(0, top))]))
            out[offset : offset + size] = value.to_bytes(size, "little")
    elif strategy == "splice":
        a = int(rng.integers(0, end))
        b = min(len(out), a + int(rng.integers(1, 64)))
        if rng.random() < 0.5:
            del out[a:b]
        else:
            out[a:a] = out[a:b]
    elif strategy == "zero":
        a = int(rng.integers(0, len(out)))
        b = min(len(out), a + int(rng.integers(16, 4097)))
        out[a:b] = bytes(b - a)
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    return bytes(out)


def case_bytes(seed: int, index: int, source: str, strategy: str) -> bytes:
    rng = np.random.default_rng([seed, index])
    return corrupt(Path(source).read_bytes(), rng, strategy)


def run(plan_path: Path, out_path: Path, start: int) -> None:
    from chexretrieve.dicom import ReadConfig, RejectedFile, read_radiograph

    plan = json.loads(plan_path.read_text())
    config = ReadConfig(allowed_modalities=None)
    target = out_path.with_suffix(".case.dcm")
    sources: dict[str, bytes] = {}
    with out_path.open("a") as out:
        for case in plan["cases"][start:]:
            index, source, strategy = case["index"], case["source"], case["strategy"]
            data = sources.setdefault(source, Path(source).read_bytes())
            target.write_bytes(
                corrupt(data, np.random.default_rng([plan["seed"], index]), strategy)
            )
            out.write(json.dumps({"start": index}) + "\n")
            out.flush()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu, wall = usage.ru_utime + usage.ru_stime, time.perf_counter()
            result: dict = {"index": index}
            try:
                radiograph = read_radiograph(target, config)
                pixels = radiograph.pixels
                sane = (
                    pixels.dtype == np.float32
                    and pixels.ndim == 2
                    and bool(np.isfinite(pixels).all())
                    and float(pixels.min()) >= 0.0
                    and float(pixels.max()) <= 1.0
                )
                result.update(outcome="read" if sane else "insane-pixels")
            except RejectedFile as exc:
                result.update(outcome="rejected", reason=exc.reason, message=exc.message[:200])
            except BaseException as exc:  # noqa: BLE001 - a crash is what we look for
                result.update(outcome="crash", message=f"{type(exc).__name__}: {exc}"[:300])
            usage = resource.getrusage(resource.RUSAGE_SELF)
            result["cpu_s"] = usage.ru_utime + usage.ru_stime - cpu
            result["wall_s"] = time.perf_counter() - wall
            out.write(json.dumps(result) + "\n")
            out.flush()


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
