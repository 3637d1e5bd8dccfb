"""Compare regenerated reports with the committed ones (eval/regenerate_reports.sh calls this).

    python eval/compare_reports.py COMMITTED_ROOT NEW_ROOT [--tolerance 1e-6]

Every table a regenerated report holds (``*.csv`` and ``*.csv.gz`` under NEW_ROOT/eval/) is read
beside the committed file of the same path: the same columns and rows, text cells equal, numeric
cells within ``tolerance`` (absolute); the gates page (eval/phantom_zero_shot.md) must be equal
text. Prints one line per file and exits 1 when anything differs or is missing. Manifests, report
pages and figures are not compared (they hold dates and timings); the staleness check
(tests/evaluation/test_committed_reports.py) reads the manifests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

#: text files compared byte for byte
EXACT_TEXT = ("eval/phantom_zero_shot.md",)


def compare_table(committed: Path, new: Path, tolerance: float) -> str | None:
    """None when the tables agree, else what differs (one line)."""
    a, b = pd.read_csv(committed), pd.read_csv(new)
    if list(a.columns) != list(b.columns):
        return f"columns differ: {list(a.columns)} vs {list(b.columns)}"
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    worst, where = 0.0, ""
    for column in a.columns:
        x, y = a[column], b[column]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            xs, ys = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
            if not np.array_equal(np.isnan(xs), np.isnan(ys)):
                return f"column {column!r}: missing values differ"
            diff = np.nan_to_num(np.abs(xs - ys))
            if diff.size and diff.max() > worst:
                worst, where = float(diff.max()), column
        elif not x.astype(str).equals(y.astype(str)):
            row = int(np.flatnonzero(x.astype(str).to_numpy() != y.astype(str).to_numpy())[0])
            return f"column {column!r} row {row}: {x.iloc[row]!r} vs {y.iloc[row]!r}"
    if worst > tolerance:
        return f"largest difference {worst:.3g} (column {where!r}) > {tolerance:g}"
    return None


def compare(committed_root: Path, new_root: Path, tolerance: float) -> list[str]:
    """One line per compared file; lines starting with "DIFFERS" or "MISSING" are failures."""
    lines = []
    tables = sorted(
        p for p in (new_root / "eval").rglob("*") if p.name.endswith((".csv", ".csv.gz"))
    )
    for new in tables:
        relative = new.relative_to(new_root)
        committed = committed_root / relative
        if not committed.is_file():
            lines.append(f"MISSING in the checkout: {relative}")
            continue
        problem = compare_table(committed, new, tolerance)
        lines.append(f"DIFFERS {relative}: {problem}" if problem else f"equal   {relative}")
    for name in EXACT_TEXT:
        new, committed = new_root / name, committed_root / name
        if not new.is_file():
            continue
        if not committed.is_file():
            lines.append(f"MISSING in the checkout: {name}")
        elif new.read_text(encoding="utf-8") != committed.read_text(encoding="utf-8"):
            lines.append(f"DIFFERS {name}: the text differs")
        else:
            lines.append(f"equal   {name}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("committed", type=Path, help="the checkout (COMMITTED_ROOT)")
    parser.add_argument("new", type=Path, help="the regenerated reports (NEW_ROOT)")
    parser.add_argument("--tolerance", type=float, default=1e-6, help="absolute, numeric cells")
    args = parser.parse_args(argv)
    lines = compare(args.committed, args.new, args.tolerance)
    print("\n".join(lines))
    failed = [line for line in lines if line.startswith(("DIFFERS", "MISSING"))]
    print(f"{len(lines) - len(failed)} of {len(lines)} files agree (tolerance {args.tolerance:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
