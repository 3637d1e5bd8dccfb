"""How the inverse temperature shapes the anchor geometries, and diagnostics of one report.

* :func:`anchor_cosine_spread`: the spread of image-anchor cosines, the scale inv_t multiplies
  (softmax anchor divergence is sharp when inv_t x spread is large, flat when it is small);
* :func:`temperature_experiment`: mean AUPRC of every geometry against inv_t (the figure also puts
  it against inv_t x spread), so a reader sees where softmax sits beside ITI and the Gaussian;
* :func:`variant_spread`: per finding, how much softmax - cosine varies between anchor variants;
* :func:`posterior_subspaces`: the latent dimension the 95%-variance rule picks on the posterior and
  how much of that subspace is the targets' own PCA (overlap 1 = the prior changes nothing).

Cells of the temperature intervals are (checkpoint, anchor variant), as in Table 2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from chexretrieve.evaluation.cohort import query_clusters
from chexretrieve.evaluation.config import IntervalConfig, ProtocolConfig, TemperatureConfig
from chexretrieve.evaluation.geometries import Fitter, fit_spec, parse_geometry
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.intervals import bootstrap_mean_of_findings
from chexretrieve.evaluation.progress import progress_bar
from chexretrieve.evaluation.protocol import LabelledArchive, finding_task
from chexretrieve.evaluation.scoring import fit_and_score

AVERAGE = "Average"
#: geometries whose ranking does not depend on inv_t (computed once, drawn as flat lines):
#: cosine and ITI ignore it; the Gaussian and latent models scale every distance by the same factor
TEMPERATURE_FREE = ("cosine", "iti", "gaussian", "latent_gaussian", "latent_spherical")


def anchor_cosine_spread(view: EncodedView, findings: Sequence[str]) -> float:
    """Mean over images, findings and anchor variants of the standard deviation, across one anchor
    set, of the image's cosines to its anchors: the spread of the logits inv_t multiplies."""
    spreads = []
    for finding in findings:
        for variant in view.anchors.findings.get(finding, ()):
            cosines = view.embeddings @ np.asarray(variant.embeddings, dtype=np.float64).T
            spreads.append(float(cosines.std(axis=1).mean()))
    if not spreads:
        raise ValueError("no anchor sets for these findings; cannot measure the cosine spread")
    return float(np.mean(spreads))


def temperature_experiment(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    config: TemperatureConfig,
    protocol: ProtocolConfig,
    intervals: IntervalConfig,
    findings: Sequence[str],
    *,
    max_block_elements: int = 4_000_000,
    fitter: Fitter | None = None,
    show_progress: bool = True,
) -> pd.DataFrame:
    """Mean AUPRC over ``findings`` of every geometry at every inverse temperature.

    The grid is ``config.inv_temperatures`` plus each encoder's own exp(logit_scale). Rows:
    geometry, inv_temperature, spread (:func:`anchor_cosine_spread`), sharpness = inv_t x spread,
    mean, low, high (95% interval over (checkpoint x variant) cells and queries).
    """
    specs = [parse_geometry(g) for g in config.geometries]
    tasks = {f: finding_task(archive, f, protocol) for f in findings}
    tasks = {f: t for f, t in tasks.items() if t.n_queries and t.key_class.sum()}
    if not tasks:
        raise ValueError("no finding has queries and relevant keys; nothing to measure")
    spread = float(np.mean([anchor_cosine_spread(v, list(tasks)) for v in views]))
    grid = sorted({float(t) for t in config.inv_temperatures} | {v.inv_temperature for v in views})
    # (geometry, inv_t) -> finding -> list of per-query AP vectors, one per (checkpoint, variant)
    cells: dict[tuple[str, float], dict[str, list[np.ndarray]]] = {}
    free: dict[tuple[str, str, str, str], np.ndarray] = {}  # temperature-free results, reused
    variants_of = {
        (v.encoder_id, f): v.anchors.findings.get(f, ())[: config.max_variants] for v in views
        for f in tasks
    }  # fmt: skip
    units = len(grid) * len(specs) * sum(len(x) for x in variants_of.values())
    with progress_bar(show_progress) as progress:
        bar = progress.add_task("temperature: inv_t x geometry x variant", total=units)
        for inv_t in grid:
            for spec in specs:
                by_finding: dict[str, list[np.ndarray]] = {}
                for view in views:
                    for finding, task in tasks.items():
                        for variant in variants_of[(view.encoder_id, finding)]:
                            key = (spec.name, view.encoder_id, finding, variant.name)
                            if spec.kind in TEMPERATURE_FREE and key in free:
                                ap = free[key]
                            else:
                                result = fit_and_score(
                                    spec,
                                    variant.embeddings,
                                    inv_t,
                                    view.embeddings,
                                    [task],
                                    prior=view.anchors.broad,
                                    fitter=fitter,
                                    max_block_elements=max_block_elements,
                                )
                                if isinstance(result, str):
                                    raise ValueError(f"{spec.name} on {finding}: {result}")
                                (ap,) = result
                                if spec.kind in TEMPERATURE_FREE:
                                    free[key] = ap
                            by_finding.setdefault(finding, []).append(ap)
                            progress.advance(bar)
                cells[(spec.name, inv_t)] = by_finding
    rows = []
    for i, ((geometry, inv_t), by_finding) in enumerate(cells.items()):
        matrices = [np.vstack(aps) for aps in by_finding.values()]
        clusters = [
            query_clusters(archive, tasks[f].query_index, intervals.unit) for f in by_finding
        ]
        interval = bootstrap_mean_of_findings(
            matrices,
            intervals,
            seed_offset=30_000 + i,
            clusters=None if intervals.unit != "patient" else clusters,
        )
        rows.append(
            {
                "finding": AVERAGE,
                "geometry": geometry,
                "inv_temperature": inv_t,
                "spread": spread,
                "sharpness": inv_t * spread,
                "mean": interval.mean,
                "low": interval.low,
                "high": interval.high,
            }
        )
    frame = pd.DataFrame(rows)
    frame.attrs["findings"] = list(tasks)
    frame.attrs["encoder_inv_temperatures"] = [v.inv_temperature for v in views]
    return frame


def variant_spread(per_query: pd.DataFrame, geometry: str, reference: str) -> pd.DataFrame:
    """Per finding, mean AP difference ``geometry`` - ``reference`` of each anchor variant (over
    checkpoints and queries): smallest, largest and standard deviation across the variants."""
    rows = []
    for finding, part in per_query.groupby("finding", sort=False):
        means = part.groupby(["geometry", "variant"])["ap"].mean()
        if geometry not in means.index.get_level_values(0):
            continue
        delta = (means.loc[geometry] - means.loc[reference]).dropna()
        rows.append(
            {
                "finding": finding,
                "variants": len(delta),
                "mean": float(delta.mean()),
                "min": float(delta.min()),
                "max": float(delta.max()),
                "std": float(delta.std(ddof=1)) if len(delta) > 1 else float("nan"),
            }
        )
    return pd.DataFrame(rows).set_index("finding") if rows else pd.DataFrame()


def subspace_overlap(basis: np.ndarray, other: np.ndarray) -> float:
    """||Uᵀ V||_F² / k for orthonormal columns U (d, k) and V (d, j): the share of U's subspace
    that lies in V's; 1 when U's subspace is inside V's, 0 when they are orthogonal."""
    return float(np.sum((basis.T @ other) ** 2) / basis.shape[1])


def posterior_subspaces(
    views: Sequence[EncodedView],
    findings: Sequence[str],
    counts: Sequence[int],
    repeats: int,
    seed: int,
    *,
    kind: str = "latent_spherical",
    k: int | str = "variance",
    inv_temperature: float = 100.0,
    fitter: Fitter | None = None,
) -> pd.DataFrame:
    """For every target count, the posterior latent dimension k and the overlap of the posterior
    subspace with the targets' own PCA subspace (same dimension) and with the broad corpus's.

    The anchor draws are those of the posterior experiment (same seed, finding order and repeat).
    """
    from chexretrieve.evaluation.experiments import _draw

    spec = parse_geometry(f"posterior_{kind}:k={k}")
    rows = []
    for view in views:
        if view.anchors.broad is None:
            raise ValueError("the posterior subspaces need a broad anchor corpus as prior")
        broad = np.asarray(view.anchors.broad, dtype=np.float64)
        broad_vectors = _principal_axes(broad)
        for f_i, finding in enumerate(findings):
            pool = view.anchors.pooled(finding)
            for n in sorted({min(c, len(pool)) for c in counts}):
                for r in range(repeats):
                    targets = pool[_draw(len(pool), n, seed, f_i, r)]
                    geom = fit_spec(spec, targets, inv_temperature, prior=broad, fitter=fitter)
                    basis = np.asarray(geom.basis, dtype=np.float64)
                    k_post = basis.shape[1]
                    target_axes = _principal_axes(np.asarray(targets, dtype=np.float64))
                    rows.append(
                        {
                            "checkpoint": view.encoder_id,
                            "finding": finding,
                            "n_targets": n,
                            "repeat": r,
                            "k": k_post,
                            "target_rank": target_axes.shape[1],
                            "overlap_target_pca": subspace_overlap(basis, target_axes[:, :k_post]),
                            "overlap_broad_pca": subspace_overlap(basis, broad_vectors[:, :k_post]),
                        }
                    )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return (
        frame.groupby("n_targets")
        .agg(
            k_mean=("k", "mean"),
            k_min=("k", "min"),
            k_max=("k", "max"),
            target_rank=("target_rank", "mean"),
            overlap_target_pca=("overlap_target_pca", "mean"),
            overlap_broad_pca=("overlap_broad_pca", "mean"),
        )
        .reset_index()
    )


def _principal_axes(points: np.ndarray, tolerance: float = 1e-10) -> np.ndarray:
    """Orthonormal principal axes of the centred points with non-zero variance, largest first."""
    centred = points - points.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    rank = int((singular > tolerance * max(singular.max(initial=0.0), 1e-300)).sum())
    return vt[:rank].T
