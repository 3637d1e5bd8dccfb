"""Run the retrieval evaluation: every finding x checkpoint x anchor variant x geometry.

Output: per-query AP in long form (finding, checkpoint, variant, geometry, query, ap) and one row of
counts per finding; ``summaries`` turns it into Tables 2 and 3 with bootstrap intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

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

    tasks, task_rows = {}, []
    for finding in config.findings:
        task = finding_task(archive, finding, config.protocol)
        row = {"finding": finding, **task_summary(task)}
        row.pop("coordinate")
        task_rows.append(row)
        if task.n_queries < config.protocol.min_queries:
            skipped.append((finding, f"{task.n_queries} queries in the query split"))
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
    return RetrievalRun(
        per_query=per_query,
        tasks=pd.DataFrame(task_rows),
        geometries=specs,
        skipped=skipped,
        checkpoints=[v.encoder_id for v in views],
    )


def _variants(view: EncodedView, finding: str, config: RetrievalEvalConfig):
    variants = view.anchors.findings.get(finding, ())
    if config.max_variants is not None:
        variants = variants[: config.max_variants]
    return variants
