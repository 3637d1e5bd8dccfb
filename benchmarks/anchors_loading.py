"""Loading the repository's anchor sets: cold and cached, and the schema fast path's ratio.

Measures in one run:

- cold load of every set under ``anchors/`` (YAML parse + schema + checks + hash), then the
  cached load (files unchanged: a stat per file);
- validation of the broad corpus (the largest file);
- the JSON-Schema check of that file done item by item vs the fast path that only sends unusual
  sentence entries through the schema (printed as a ratio).

    .venv/bin/python benchmarks/anchors_loading.py
"""

from __future__ import annotations

import time

from chexretrieve.anchors import anchors_root, files, find_anchor_sets


def main() -> None:
    start = time.perf_counter()
    sets = find_anchor_sets()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    find_anchor_sets()
    cached = time.perf_counter() - start
    path = anchors_root() / "broad" / "clinical-v1.yaml"
    start = time.perf_counter()
    report = files.validate_anchor_file(path)
    validate = time.perf_counter() - start
    assert report.ok, report.problems
    loader = files._Loader(path.read_text(encoding="utf-8"))
    data = loader.get_single_data()
    loader.dispose()
    start = time.perf_counter()
    list(files._schema_validator().iter_errors(data))
    full = time.perf_counter() - start
    start = time.perf_counter()
    files._schema_errors(data)
    fast = time.perf_counter() - start
    sentences = sum(len(s) for s in sets)
    head = f"{len(sets)} sets, {sentences} sentences"
    print(f"{head}: cold load {cold:.2f} s, cached {cached * 1e3:.0f} ms")
    print(f"broad corpus ({len(report.anchor_set)} sentences): validate {validate:.2f} s")
    print(f"schema check item by item {full:.3f} s vs fast path {fast:.3f} s: {full / fast:.0f}x")


if __name__ == "__main__":
    main()
