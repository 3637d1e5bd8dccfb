"""From per-query AP to the report's tables: AUPRC per geometry, paired differences, intervals.

Table 2 of the paper: softmax - cosine and softmax - ITI per finding. Table 3: every parametric (and
here also MovMF and posterior) geometry - cosine. Each entry is the mean over (variant, checkpoint)
cells and queries with the bootstrap interval of ``chexretrieve.evaluation.intervals``. The
"Average" row averages the findings with equal weight; its cells are the (checkpoint, k-th
variant) pairs present for every finding. The bootstrap resamples patients (``IntervalConfig.unit``
"patient", the query's ``patient`` in ``RetrievalRun.queries``) or images.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from chexretrieve.evaluation.config import IntervalConfig
from chexretrieve.evaluation.intervals import bootstrap_mean, bootstrap_mean_of_findings
from chexretrieve.evaluation.multiplicity import add_holm
from chexretrieve.evaluation.runner import RetrievalRun

AVERAGE = "Average"


def ap_matrix(per_query: pd.DataFrame, finding: str, geometry: str) -> pd.DataFrame:
    """(cells, queries) AP matrix of one finding and geometry; cells = (checkpoint, variant)."""
    rows = per_query[(per_query["finding"] == finding) & (per_query["geometry"] == geometry)]
    if rows.empty:
        raise ValueError(f"no results for geometry {geometry!r} on {finding!r}")
    matrix = rows.pivot_table(
        index=["checkpoint", "variant"], columns="query", values="ap", aggfunc="first"
    )
    return matrix.sort_index()


def _ranked_cells(matrix: pd.DataFrame) -> pd.DataFrame:
    """Re-index cells as (checkpoint, variant rank): findings with other variant names align."""
    ranks = matrix.groupby(level="checkpoint").cumcount()
    out = matrix.copy()
    out.index = pd.MultiIndex.from_arrays(
        [matrix.index.get_level_values("checkpoint"), ranks.to_numpy()], names=["checkpoint", "k"]
    )
    return out


def _findings(run: RetrievalRun) -> list[str]:
    return list(dict.fromkeys(run.per_query["finding"]))


def _has(run: RetrievalRun, finding: str, geometry: str) -> bool:
    pq = run.per_query
    return bool(((pq["finding"] == finding) & (pq["geometry"] == geometry)).any())


def _stat_row(finding: str, interval, **extra) -> dict:
    return {
        "finding": finding,
        **extra,
        "mean": interval.mean,
        "low": interval.low,
        "high": interval.high,
        "n_cells": interval.n_cells,
        "n_queries": interval.n_queries,
        "n_patients": interval.n_patients,
        "interval_note": interval.note,
    }


def clusters_of(run: RetrievalRun, config: IntervalConfig, query_ids) -> list[str] | None:
    """The bootstrap cluster of each query id: its patient (unit "patient"), or None (images)."""
    if config.unit != "patient":
        return None
    patients = run.query_patients()
    return [patients.get(str(q), f"image:{q}") for q in query_ids]


def _with_average(
    matrices: dict[str, pd.DataFrame],
    config: IntervalConfig,
    seed_offset: int,
    run: RetrievalRun | None = None,
) -> dict | None:
    if len(matrices) < 2:
        return None
    ranked = [_ranked_cells(m) for m in matrices.values()]
    common = ranked[0].index
    for m in ranked[1:]:
        common = common.intersection(m.index)
    if len(common) == 0:
        return None
    clusters = None if run is None else [clusters_of(run, config, m.columns) for m in ranked]
    if clusters is not None and any(c is None for c in clusters):
        clusters = None
    return bootstrap_mean_of_findings(
        [m.loc[common].to_numpy() for m in ranked],
        config,
        seed_offset=seed_offset,
        clusters=clusters,
    )


def auprc_table(run: RetrievalRun, config: IntervalConfig) -> pd.DataFrame:
    """Mean AUPRC with interval per finding and geometry (long form, with an Average row)."""
    rows = []
    for g_i, spec in enumerate(run.geometries):
        matrices = {}
        findings = _findings(run)
        for f_i, finding in enumerate(findings):
            if not _has(run, finding, spec.name):
                continue
            m = ap_matrix(run.per_query, finding, spec.name)
            matrices[finding] = m
            interval = bootstrap_mean(
                m.to_numpy(),
                config,
                seed_offset=1000 * g_i + f_i,
                clusters=clusters_of(run, config, m.columns),
            )
            rows.append(_stat_row(finding, interval, geometry=spec.name))
        # the average only over the full set of findings (a partial average would not compare)
        full = len(matrices) == len(findings)
        avg = _with_average(matrices, config, 1000 * g_i + 999, run) if full else None
        if avg is not None:
            rows.append(_stat_row(AVERAGE, avg, geometry=spec.name))
    return pd.DataFrame(rows)


def difference_table(
    run: RetrievalRun,
    pairs: Sequence[tuple[str, str]],
    config: IntervalConfig,
) -> pd.DataFrame:
    """Paired AP differences geometry - reference, per finding, with intervals (long form), the
    bootstrap p-value of each, and per finding the Holm-adjusted p-value over the comparison's
    findings with its (exploratory) verdict (``multiplicity.add_holm``)."""
    available = {s.name for s in run.geometries}
    rows = []
    for p_i, (geometry, reference) in enumerate(pairs):
        if geometry not in available or reference not in available:
            continue
        matrices = {}
        findings = _findings(run)
        for f_i, finding in enumerate(findings):
            if not (_has(run, finding, geometry) and _has(run, finding, reference)):
                continue
            a = ap_matrix(run.per_query, finding, geometry)
            b = ap_matrix(run.per_query, finding, reference)
            if not a.index.equals(b.index) or not a.columns.equals(b.columns):
                raise ValueError(
                    f"{geometry!r} and {reference!r} were not scored on the same cells and "
                    f"queries for {finding!r}; rerun them together"
                )
            diff = a - b
            matrices[finding] = diff
            interval = bootstrap_mean(
                diff.to_numpy(),
                config,
                seed_offset=7919 * (p_i + 1) + f_i,
                clusters=clusters_of(run, config, diff.columns),
            )
            rows.append(
                {
                    **_stat_row(finding, interval, geometry=geometry, reference=reference),
                    "p_value": interval.p_value,
                }
            )
        full = len(matrices) == len(findings)
        avg = _with_average(matrices, config, 7919 * (p_i + 1) + 999, run) if full else None
        if avg is not None:
            rows.append(
                {
                    **_stat_row(AVERAGE, avg, geometry=geometry, reference=reference),
                    "p_value": avg.p_value,
                }
            )
    return add_holm(pd.DataFrame(rows))


def table2_pairs(run: RetrievalRun) -> list[tuple[str, str]]:
    """Softmax against each reference geometry (the paper's Table 2)."""
    return [("softmax", "cosine"), ("softmax", "iti")]


def table3_pairs(run: RetrievalRun) -> list[tuple[str, str]]:
    """Every anchor geometry other than the references against cosine (the paper's Table 3)."""
    skip = {"cosine", "iti"}
    return [(s.name, "cosine") for s in run.geometries if s.name not in skip]


def significance(mean: float, threshold: float = 0.005) -> str:
    """The paper's colour rule: 'better' above +threshold, 'worse' below -threshold, else 'flat'."""
    if np.isnan(mean):
        return "flat"
    if mean > threshold:
        return "better"
    if mean < -threshold:
        return "worse"
    return "flat"
