"""Run the retrieval evaluation: every finding x checkpoint x anchor variant x geometry.

Output: per-query AP in long form (finding, checkpoint, variant, geometry, query, ap) and one row of
counts per finding; ``summaries`` turns it into Tables 2 and 3 with bootstrap intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from chexretrieve.evaluation.cohort import Cohort, dataset_names, select_cohort
from chexretrieve.evaluation.config import RetrievalEvalConfig
from chexretrieve.evaluation.geometries import Fitter, GeometrySpec, parse_geometry
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.progress import progress_bar
from chexretrieve.evaluation.protocol import LabelledArchive, finding_task, task_summary
from chexretrieve.evaluation.scoring import fit_and_score


@dataclass
class RetrievalRun:
    """Everything the tables, figures and report need from one evaluation run."""

    per_query: pd.DataFrame  # finding, checkpoint, variant, geometry, query, ap
    tasks: pd.DataFrame  # finding, n_queries, n_keys, n_relevant_keys, prevalence
    geometries: list[GeometrySpec]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (what, why)
    checkpoints: list[str] = field(default_factory=list)
    cohort: Cohort | None = None  # views used, patients, the splits' overlap
    # one row per (finding, query): query (archive id), image (data-set path or id), patient,
    # view, split; and one row per key image with its relevance label per evaluated finding
    queries: pd.DataFrame = field(default_factory=pd.DataFrame)
    keys: pd.DataFrame = field(default_factory=pd.DataFrame)

    def query_patients(self) -> dict[str, str]:
        """Archive id of every query -> its patient (the cluster bootstrap's unit)."""
        if self.queries.empty:
            return {}
        return dict(zip(self.queries["query"], self.queries["patient"], strict=True))


def _inv_temperature(view: EncodedView, config: RetrievalEvalConfig) -> float:
    return float(config.inv_temperature or view.inv_temperature)


def run_retrieval(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    config: RetrievalEvalConfig,
    *,
    fitter: Fitter | None = None,
    show_progress: bool = True,
) -> RetrievalRun:
    """Per-query AP of every configured geometry on every finding, checkpoint and anchor variant."""
    if not views:
        raise ValueError("no encoder views to evaluate; pass at least one checkpoint")
    specs = [parse_geometry(s) for s in config.geometries]
    for ref in config.references:
        if ref not in [s.name for s in specs]:
            specs.insert(0, parse_geometry(ref))
    skipped: list[tuple[str, str]] = []
    if any(s.posterior for s in specs) and any(v.anchors.broad is None for v in views):
        skipped += [(s.name, "no broad anchor corpus for the prior") for s in specs if s.posterior]
        specs = [s for s in specs if not s.posterior]

    cohort = select_cohort(archive, config.protocol)  # PatientOverlapError when splits leak
    tasks, task_rows = {}, []
    for finding in config.findings:
        task = finding_task(archive, finding, config.protocol, cohort.usable)
        row = {"finding": finding, **task_summary(task)}
        row.pop("coordinate")
        task_rows.append(row)
        if task.n_queries < config.protocol.min_queries:
            n = task.n_queries
            skipped.append(
                (
                    finding,
                    f"{n} {'query' if n == 1 else 'queries'} in the query split, fewer than "
                    f"min_queries = {config.protocol.min_queries}",
                )
            )
        elif row["n_relevant_keys"] < config.protocol.min_relevant_keys:
            skipped.append((finding, f"{row['n_relevant_keys']} positive keys"))
        elif not all(finding in v.anchors.findings and v.anchors.findings[finding] for v in views):
            skipped.append((finding, "no anchor sets"))
        else:
            tasks[finding] = task

    image_ids = np.asarray(archive.image_ids).astype(str)
    frames: list[pd.DataFrame] = []
    failed: dict[tuple[str, str], str] = {}  # (finding, geometry) -> why the geometry failed
    units = sum(len(_variants(v, f, config)) * len(specs) for v in views for f in tasks)
    with progress_bar(show_progress) as progress:
        bar = progress.add_task("retrieval: geometry x variant x checkpoint", total=units)
        for view in views:
            inv_t = _inv_temperature(view, config)
            for finding, task in tasks.items():
                variants = _variants(view, finding, config)
                query_ids = image_ids[task.query_index]
                anchor_free: dict[str, np.ndarray] = {}
                for variant in variants:
                    for spec in specs:
                        if (finding, spec.name) in failed:
                            progress.advance(bar)
                            continue
                        if not spec.needs_anchors and spec.name in anchor_free:
                            ap = anchor_free[spec.name]
                        else:
                            result = fit_and_score(
                                spec,
                                variant.embeddings,
                                inv_t,
                                view.embeddings,
                                [task],
                                prior=view.anchors.broad,
                                fitter=fitter,
                                max_block_elements=config.max_block_elements,
                            )
                            if isinstance(result, str):
                                failed[(finding, spec.name)] = (
                                    f"{result} (variant {variant.name}, {view.encoder_id})"
                                )
                                progress.advance(bar)
                                continue
                            (ap,) = result
                            if not spec.needs_anchors:
                                anchor_free[spec.name] = ap
                        frames.append(
                            pd.DataFrame(
                                {
                                    "finding": finding,
                                    "checkpoint": view.encoder_id,
                                    "variant": variant.name,
                                    "geometry": spec.name,
                                    "query": query_ids,
                                    "ap": ap,
                                }
                            )
                        )
                        progress.advance(bar)
    per_query = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["finding", "checkpoint", "variant", "geometry", "query", "ap"])
    )
    if failed:  # a geometry that failed on any cell of a finding is dropped for that finding
        drop = per_query[["finding", "geometry"]].apply(tuple, axis=1).isin(set(failed))
        per_query = per_query[~drop].reset_index(drop=True)
        skipped += [(f"{g} on {f}", why) for (f, g), why in failed.items()]
    queries, keys = _query_and_key_lists(archive, cohort, tasks)
    return RetrievalRun(
        per_query=per_query,
        tasks=pd.DataFrame(task_rows),
        geometries=specs,
        skipped=skipped,
        checkpoints=[v.encoder_id for v in views],
        cohort=cohort,
        queries=queries,
        keys=keys,
    )


def _image_columns(archive: LabelledArchive, cohort: Cohort, rows: np.ndarray) -> dict:
    labels = archive.labels
    out = {
        "query": np.asarray(archive.image_ids).astype(str)[rows],
        "image": dataset_names(archive)[rows],
        "patient": cohort.patients[rows],
    }
    if "study_id" in labels.columns:
        out["study"] = labels["study_id"].to_numpy(dtype=object)[rows]
    from chexretrieve.evaluation.cohort import view_groups

    groups, _ = view_groups(labels)
    if groups is not None:
        out["view"] = groups[rows]
    out["split"] = np.asarray(archive.splits).astype(str)[rows]
    return out


def _query_and_key_lists(archive, cohort, tasks) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The queries of every evaluated finding, and every key with its relevance per finding
    (1 relevant, 0 not, blank: not a key for that finding)."""
    query_frames = [
        pd.DataFrame({"finding": finding, **_image_columns(archive, cohort, task.query_index)})
        for finding, task in tasks.items()
    ]
    queries = (
        pd.concat(query_frames, ignore_index=True)
        if query_frames
        else pd.DataFrame(columns=["finding", "query", "image", "patient", "split"])
    )
    if not tasks:
        return queries, pd.DataFrame(columns=["query", "image", "patient", "split"])
    rows = np.unique(np.concatenate([t.key_index for t in tasks.values()]))
    keys = pd.DataFrame(_image_columns(archive, cohort, rows)).rename(columns={"query": "key"})
    for finding, task in tasks.items():
        column = pd.Series(np.nan, index=rows)
        column[task.key_index] = task.key_class
        keys[finding] = column.to_numpy()
    return queries, keys


def _variants(view: EncodedView, finding: str, config: RetrievalEvalConfig):
    variants = view.anchors.findings.get(finding, ())
    if config.max_variants is not None:
        variants = variants[: config.max_variants]
    return variants
