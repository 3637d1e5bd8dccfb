"""Experiments (a)-(c): anchor mixing (paper Fig. 3), anchor budget (Fig. 4), posterior adaptation
(Fig. 5). Each returns a tidy frame of mean AUPRC with bootstrap intervals, ready to plot.

Cells of the intervals: (checkpoint, anchor variant) for mixing; (checkpoint, random anchor draw)
for the budget and posterior curves; patients (or images: ``IntervalConfig.unit``) are resampled as
in ``intervals``. Curves averaged over findings use ``bootstrap_mean_of_findings``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd

from chexretrieve.evaluation.cohort import query_clusters
from chexretrieve.evaluation.config import (
    BudgetConfig,
    IntervalConfig,
    MixingConfig,
    PosteriorConfig,
    ProtocolConfig,
)
from chexretrieve.evaluation.geometries import Fitter, GeometrySpec, fit_spec, parse_geometry
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.intervals import bootstrap_mean, bootstrap_mean_of_findings
from chexretrieve.evaluation.progress import progress_bar
from chexretrieve.evaluation.protocol import (
    LabelledArchive,
    RetrievalTask,
    category_task,
    finding_task,
)
from chexretrieve.evaluation.scoring import fit_and_score, task_average_precision
from chexretrieve.geometry import POSTERIOR_KINDS, GeometryName

AVERAGE = "Average"


def _row(interval, **keys) -> dict:
    return {**keys, "mean": interval.mean, "low": interval.low, "high": interval.high}


def _usable(task: RetrievalTask) -> bool:
    return task.n_queries > 0 and int(task.key_class.sum()) > 0


def mix_anchors(anchors_a: np.ndarray, anchors_b: np.ndarray, p: float):
    """Union with weights p/N_A and (1 - p)/N_B (the mixture p q_A + (1 - p) q_B)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"mixing weight p must lie in [0, 1], got {p}")
    weights = np.concatenate(
        [
            np.full(len(anchors_a), p / len(anchors_a)),
            np.full(len(anchors_b), (1 - p) / len(anchors_b)),
        ]
    )
    return np.vstack([anchors_a, anchors_b]), weights


def mixing_experiment(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    config: MixingConfig,
    protocol: ProtocolConfig,
    intervals: IntervalConfig,
    *,
    inv_temperature: float | None = None,
    max_block_elements: int = 4_000_000,
    fitter: Fitter | None = None,
    show_progress: bool = True,
) -> pd.DataFrame:
    """AUPRC of the finding and of the nuisance coordinate vs the finding-anchor weight p."""
    spec = parse_geometry(config.geometry)
    for view in views:
        if config.nuisance not in view.anchors.nuisance:
            known = ", ".join(view.anchors.nuisance) or "none"
            raise ValueError(
                f"no nuisance anchor set {config.nuisance!r} for {view.encoder_id} (found: {known})"
            )
    nuisance_task = category_task(archive, config.nuisance_label, protocol)
    if nuisance_task.n_queries == 0:
        raise ValueError(
            f"no query-split image has a {config.nuisance_label!r} label; "
            "pick another nuisance label"
        )
    coordinate_name = f"{config.nuisance_label} (nuisance)"
    cells: dict[tuple[str, float, str], list[np.ndarray]] = defaultdict(list)
    findings = [f for f in config.findings if _usable(finding_task(archive, f, protocol))]
    units = sum(len(v.anchors.findings.get(f, ())) for v in views for f in findings)
    with progress_bar(show_progress) as progress:
        bar = progress.add_task("mixing: anchor weight p", total=units * len(config.weights))
        for view in views:
            inv_t = float(inv_temperature or view.inv_temperature)
            nuisance = view.anchors.nuisance[config.nuisance]
            for finding in findings:
                task = finding_task(archive, finding, protocol)
                for variant in view.anchors.variants(finding):
                    for p in config.weights:
                        anchors, weights = mix_anchors(variant.embeddings, nuisance, float(p))
                        geom = fit_spec(spec, anchors, inv_t, fitter=fitter, weights=weights)
                        ap_f, ap_n = task_average_precision(
                            geom,
                            view.embeddings,
                            [task, nuisance_task],
                            max_block_elements=max_block_elements,
                        )
                        cells[(finding, float(p), finding)].append(ap_f)
                        cells[(finding, float(p), coordinate_name)].append(ap_n)
                        progress.advance(bar)
    rows = []
    queries_of = {f: finding_task(archive, f, protocol).query_index for f in findings}
    queries_of[coordinate_name] = nuisance_task.query_index
    for i, ((finding, p, coordinate), aps) in enumerate(cells.items()):
        clusters = query_clusters(archive, queries_of[coordinate], intervals.unit)
        interval = bootstrap_mean(np.vstack(aps), intervals, seed_offset=i, clusters=clusters)
        rows.append(_row(interval, finding=finding, p=p, coordinate=coordinate))
    return pd.DataFrame(rows)


def _draw(pool_size: int, n: int, seed: int, finding_index: int, repeat: int) -> np.ndarray:
    rng = np.random.default_rng([seed, finding_index, n, repeat])
    return np.sort(rng.choice(pool_size, size=n, replace=False))


def anchor_curve(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    specs: Sequence[GeometrySpec],
    findings: Sequence[str],
    counts: Sequence[int],
    repeats: int,
    seed: int,
    protocol: ProtocolConfig,
    intervals: IntervalConfig,
    *,
    inv_temperature: float | None = None,
    max_block_elements: int = 4_000_000,
    fitter: Fitter | None = None,
    show_progress: bool = True,
    description: str = "anchor budget",
) -> pd.DataFrame:
    """Mean AUPRC per geometry and anchor count, per finding and averaged over findings.

    For each count n and repeat r, n anchors are drawn without replacement from the finding's pooled
    variants (the same draw for every checkpoint and geometry). A count above the pool becomes the
    whole pool (all anchors of the finding).
    """
    tasks = {f: finding_task(archive, f, protocol) for f in findings}
    tasks = {f: t for f, t in tasks.items() if _usable(t)}
    # (geometry, n) -> finding -> list of per-query AP vectors (one per (checkpoint, repeat) cell)
    results: dict[tuple[str, int], dict[str, list[np.ndarray]]] = defaultdict(
        lambda: defaultdict(list)
    )
    failed: dict[tuple[str, int, str], str] = {}  # (geometry, n, finding) -> why it failed
    pool_sizes = {f: min(len(v.anchors.pooled(f)) for v in views) for f in tasks}
    # a count above a finding's pool means "all its anchors" (the full-coverage end of the curve)
    plan = [(f, n) for f in tasks for n in sorted({min(c, pool_sizes[f]) for c in counts})]
    with progress_bar(show_progress) as progress:
        bar = progress.add_task(description, total=len(plan) * repeats * len(views))
        for view in views:
            inv_t = float(inv_temperature or view.inv_temperature)
            for f_i, finding in enumerate(tasks):
                task = tasks[finding]
                pool = view.anchors.pooled(finding)
                cosine_ap = None
                for n in [n for f, n in plan if f == finding]:
                    for r in range(repeats):
                        anchors = pool[_draw(len(pool), n, seed, f_i, r)]
                        for spec in specs:
                            if (spec.name, n, finding) in failed:
                                continue
                            if not spec.needs_anchors and cosine_ap is not None:
                                ap = cosine_ap
                            else:
                                result = fit_and_score(
                                    spec,
                                    anchors,
                                    inv_t,
                                    view.embeddings,
                                    [task],
                                    prior=view.anchors.broad,
                                    fitter=fitter,
                                    max_block_elements=max_block_elements,
                                )
                                if isinstance(result, str):
                                    failed[(spec.name, n, finding)] = result
                                    continue
                                (ap,) = result
                                if not spec.needs_anchors:
                                    cosine_ap = ap
                            results[(spec.name, n)][finding].append(ap)
                        progress.advance(bar)
    for geometry, n, finding in failed:  # partial cells of a failed point are dropped
        results.get((geometry, n), {}).pop(finding, None)
    rows = []
    for i, ((geometry, n), by_finding) in enumerate(sorted(results.items())):
        if not by_finding:
            continue
        matrices = {f: np.vstack(aps) for f, aps in by_finding.items()}
        clusters = {
            f: query_clusters(archive, tasks[f].query_index, intervals.unit) for f in matrices
        }
        for j, (finding, matrix) in enumerate(matrices.items()):
            interval = bootstrap_mean(
                matrix, intervals, seed_offset=10_000 + 100 * i + j, clusters=clusters[finding]
            )
            rows.append(_row(interval, finding=finding, geometry=geometry, n_anchors=n))
        if len(matrices) == len(tasks):  # the average only where every finding has this count
            interval = bootstrap_mean_of_findings(
                list(matrices.values()),
                intervals,
                seed_offset=20_000 + i,
                clusters=None if intervals.unit != "patient" else list(clusters.values()),
            )
            rows.append(_row(interval, finding=AVERAGE, geometry=geometry, n_anchors=n))
    frame = pd.DataFrame(rows)
    frame.attrs["skipped"] = [
        f"{description}: {g} with {n} anchors on {f}: {why}" for (g, n, f), why in failed.items()
    ]
    return frame


def _curve_findings(config: BudgetConfig | PosteriorConfig, findings: Sequence[str]) -> list[str]:
    """The named findings, else the first ``max_findings`` of ``findings`` (most queries first)."""
    if config.findings:
        return list(config.findings)
    return list(findings)[: config.max_findings] if config.max_findings else list(findings)


def budget_experiment(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    config: BudgetConfig,
    protocol: ProtocolConfig,
    intervals: IntervalConfig,
    findings: Sequence[str],
    **kwargs,
) -> pd.DataFrame:
    """Fig. 4: AUPRC vs number of anchors for each model (cosine included as the flat reference)."""
    specs = [parse_geometry("cosine")] + [parse_geometry(g) for g in config.geometries]
    return anchor_curve(
        archive,
        views,
        specs,
        _curve_findings(config, findings),
        config.anchor_counts,
        config.repeats,
        config.seed,
        protocol,
        intervals,
        description="anchor budget",
        **kwargs,
    )


def posterior_experiment(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    config: PosteriorConfig,
    protocol: ProtocolConfig,
    intervals: IntervalConfig,
    findings: Sequence[str],
    **kwargs,
) -> pd.DataFrame:
    """Fig. 5: target-only models vs posterior twins (broad prior) vs number of target anchors."""
    if any(v.anchors.broad is None for v in views):
        raise ValueError(
            "the posterior experiment needs a broad anchor corpus (anchors/broad/...) as prior"
        )
    names = ["cosine", *config.geometries]
    if config.posterior_geometries:
        names += list(config.posterior_geometries)
    else:
        twins = (GeometryName(g, posterior=True) for g in config.geometries if g in POSTERIOR_KINDS)
        names += [twin.prefixed for twin in twins]
    specs = [parse_geometry(n) for n in names]
    return anchor_curve(
        archive,
        views,
        specs,
        _curve_findings(config, findings),
        config.target_counts,
        config.repeats,
        config.seed,
        protocol,
        intervals,
        description="posterior adaptation",
        **kwargs,
    )
