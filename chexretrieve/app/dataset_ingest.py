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
#: first folders below a data-set root (MIMIC files/, CheXpert train/ valid/ test/)
_PART_FOLDERS = ("files", "train", "valid", "test", "CheXpert-v1.0")


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
    from chexretrieve.datasets import load_dataset
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
    found_root, found_kind = dataset_root(paths)
    single = paths[0] if len(paths) == 1 and paths[0].is_dir() else None
    root, kind = None, None
    if dataset == "auto":
        root, kind = found_root, found_kind
        if kind is None and mimic_files and single is not None:
            root, kind = single, "mimic-cxr"  # MIMIC's files given apart: the DICOM release
        if kind is not None:
            where = "" if root == single else f" at {root}"
            plan.messages.append(
                f"data set: {kind}{where} (detected; --dataset none to read no files)"
            )
    elif dataset != "none":
        if found_kind == dataset:
            root, kind = found_root, dataset
        elif single is not None:
            root, kind = single, dataset
        else:
            raise ValueError(f"--dataset {dataset} needs exactly one PATH: the data set's root")
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


def structured_report_files(report) -> list[Path]:  # noqa: ANN001
    """Files of an ingest run that were set aside as non-image objects (SR among them)."""
    return [Path(o.path) for o in report.outcomes if o.reason == "non-image-object"]


def dataset_root(paths: list[Path], levels: int = 6) -> tuple[Path | None, str | None]:
    """(root, layout) of the data set the PATHs belong to: a PATH itself, or the nearest folder
    above it that ``detect_layout`` recognises (so that a part such as ``files/p10`` or
    ``CheXpert-v1.0-small/valid`` can be ingested alone); (None, None) when the PATHs belong to
    none, or to different ones."""
    from chexretrieve.datasets import detect_layout

    found = []
    for path in paths:
        folder = path.absolute() if path.is_dir() else path.absolute().parent
        hit = None
        for candidate in [folder, *folder.parents][:levels]:
            inside = folder.relative_to(candidate).parts
            if inside and not inside[0].startswith(_PART_FOLDERS):
                continue  # only the data sets' own sub-folders lead up to their root
            kind = detect_layout(candidate)
            if kind is not None:
                hit = (candidate, kind)
                break
        found.append(hit)
    if found and found[0] is not None and all(h == found[0] for h in found):
        return found[0]
    return None, None


def store_reports(
    store,
    dataset,
    report_csvs: list[Path],
    sr_files: list[Path] = (),  # noqa: ANN001
) -> tuple[Counter, int]:
    """Store the data set's report files, the reports CSVs' rows and the text of DICOM SR files
    (keyed by StudyInstanceUID) per study; (counts of new / changed / unchanged reports, CSV
    rows that matched no stored image or study)."""
    from chexretrieve.datasets.reports import read_report_file, read_reports_csv
    from chexretrieve.dicom.sr_text import read_sr_text

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
    for path in sr_files:
        found = read_sr_text(path)
        if found is not None:
            pending[found[0]] = (found[1], str(path))
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
