"""`chexretrieve ingest` on public data sets: which label sources a run uses, and its reports.

``label_sources(paths, labels, dataset, mimic_labels)`` turns the command's PATHS and ``--labels``
files into one labels source for the pipeline: a data-set root (detected, or named by
``--dataset``) is read with ``chexretrieve.datasets``; each ``--labels`` file is either a
CheXpert-format CSV (a ``Path`` column) or one of MIMIC's own files (recognised by its columns),
which then joins the data set. ``store_reports`` stores the data set's report files and any
``--reports`` CSV per study after the images are in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DATASET_CHOICES = ("auto", "none", "chexpert", "mimic-cxr-jpg", "mimic-cxr")
REPORT_BATCH = 2000


@dataclass
class LabelPlan:
    """The labels source of one run and what the command should say about it."""

    source: object | None  # LabelTable, DatasetIndex or LabelSources; None = no labels
    dataset: object | None = None  # the DatasetIndex when a data set was read
    messages: list[str] = field(default_factory=list)


def label_sources(
    paths: list[Path], labels: list[Path], dataset: str = "auto", mimic_labels: str = "chexpert"
) -> LabelPlan:
    """ValueError names the file or option that is wrong; nothing is written."""
    from chexretrieve.datasets import detect_layout, load_dataset
    from chexretrieve.datasets.mimic import classify_mimic_file
    from chexretrieve.datasets.tables import read_header
    from chexretrieve.ingest.labels import LabelSources, read_label_csv

    if dataset not in DATASET_CHOICES:
        raise ValueError(f"--dataset {dataset!r} is not one of {', '.join(DATASET_CHOICES)}")
    tables, mimic_files = [], []
    for path in labels:
        header = read_header(path)
        if "path" in [h.lower() for h in header] and classify_mimic_file(path) is None:
            tables.append(read_label_csv(path))
        elif classify_mimic_file(path) is not None:
            mimic_files.append(path)
        else:
            raise ValueError(
                f"--labels {path}: neither a CheXpert-format CSV (Path + finding columns) nor a "
                f"MIMIC-CXR file (columns: {header})"
            )
    plan = LabelPlan(None)
    root = paths[0] if len(paths) == 1 and paths[0].is_dir() else None
    kind = None
    if dataset == "auto" and root is not None:
        kind = detect_layout(root)
        if kind is None and mimic_files:
            kind = "mimic-cxr"  # MIMIC's files given apart: the DICOM release's root
        if kind is not None:
            plan.messages.append(f"data set: {kind} (detected; --dataset none to read no files)")
    elif dataset not in ("auto", "none"):
        if root is None:
            raise ValueError(f"--dataset {dataset} needs exactly one PATH: the data set's root")
        kind = dataset
    if mimic_files and kind not in ("mimic-cxr", "mimic-cxr-jpg"):
        raise ValueError(
            f"{mimic_files[0]} is a MIMIC-CXR file, but the PATH is not a MIMIC-CXR(-JPG) root; "
            "give the root as the only PATH (with --dataset mimic-cxr if it is not detected)"
        )
    sources: list = []
    if kind is not None:
        index = load_dataset(root, kind, extra_files=mimic_files, mimic_labels=mimic_labels)
        plan.dataset = index
        plan.messages += index.notes
        sources.append(index)
    sources += tables
    if len(sources) == 1:
        plan.source = sources[0]
    elif sources:
        plan.source = LabelSources(sources)
    return plan


def store_reports(store, dataset, report_csvs: list[Path]) -> tuple[Counter, int]:  # noqa: ANN001
    """Store the data set's report files and the reports CSVs' rows per study; (counts of new /
    changed / unchanged reports, CSV rows that matched no stored image or study)."""
    from chexretrieve.datasets.reports import read_report_file, read_reports_csv

    counts: Counter = Counter()
    unmatched = 0
    pending: dict[str, tuple[str, str | None]] = {}

    def flush() -> None:
        counts.update(store.put_reports(pending))
        pending.clear()

    if dataset is not None:
        for study, path in sorted(dataset.report_files.items()):
            pending[study] = (read_report_file(path), str(path))
            if len(pending) >= REPORT_BATCH:
                flush()
    rows = [row for path in report_csvs for row in read_reports_csv(path)]
    keys = store.report_keys() if rows else {}
    for row in rows:
        key = _study_key(row, keys)
        if key is None:
            unmatched += 1
            continue
        pending[key] = (row.text, row.source)
        if len(pending) >= REPORT_BATCH:
            flush()
    flush()
    return counts, unmatched


def _study_key(row, keys: dict[str, str]) -> str | None:  # noqa: ANN001
    if row.key_kind == "study":
        return keys.get(row.key)
    name = row.key
    for _ in range(4):  # the path as stored, else without its first folders
        if name in keys:
            return keys[name]
        if "/" not in name:
            break
        name = name.split("/", 1)[1]
    return None
