"""One evaluation report from an archive and its encoder views: tables, experiments, figures.

The CLI (``chexretrieve eval retrieval``) picks a source and calls :func:`evaluate`; tests and
notebooks can call it with any archive and views.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chexretrieve.evaluation.config import EvaluationPlan
from chexretrieve.evaluation.experiments import (
    budget_experiment,
    mixing_experiment,
    posterior_experiment,
)
from chexretrieve.evaluation.geometries import Fitter
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.protocol import LabelledArchive
from chexretrieve.evaluation.protocol_text import interval_paragraph, protocol_paragraph
from chexretrieve.evaluation.report import EvaluationReport
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.runtime import time_retrieval
from chexretrieve.evaluation.summaries import (
    auprc_table,
    difference_table,
    table2_pairs,
    table3_pairs,
)
from chexretrieve.evaluation.temperature import (
    posterior_subspaces,
    temperature_experiment,
    variant_spread,
)


class NothingEvaluatedError(ValueError):
    """No finding could be scored (every one skipped); the message lists why."""


def evaluate(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    plan: EvaluationPlan,
    *,
    title: str,
    command: str,
    source: str,
    fitter: Fitter | None = None,
    show_progress: bool = True,
    broad_sets: Sequence[str] | None = None,
    unlabelled: Mapping[str, int] | None = None,
) -> EvaluationReport:
    """Run the tables and every experiment of ``plan``; an experiment that cannot run on this
    data (no nuisance anchors, no broad corpus) is skipped with a note in the report.

    ``broad_sets``: the keys of the broad anchor sets pooled as the posterior models' prior (named
    in the Protocol paragraph); ``unlabelled``: images the source left out for want of a labels
    row, by split (stated in the Protocol; None: the source lists images by their label rows).
    PatientOverlapError when the splits share patients (unless the
    protocol allows it); NothingEvaluatedError when no finding could be scored."""
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    with threadpool_limits(plan.blas_threads):
        report = _tables_and_curves(archive, views, plan, fitter, show_progress)
    report.title, report.command, report.source = title, command, source
    run, config = report.run, plan.retrieval
    posterior_used = any(s.posterior for s in run.geometries) or report.posterior is not None
    report.protocol = protocol_paragraph(
        config.protocol, run.cohort, broad_sets, posterior_used, unlabelled
    )
    report.interval_text = interval_paragraph(config.intervals, run.cohort)
    report.settings["broad_sets"] = list(broad_sets or [])
    if "runtime" in plan.experiments:
        report.runtime = time_retrieval(plan.runtime, fitter=fitter, show_progress=show_progress)
    return report


def _tables_and_curves(
    archive: LabelledArchive,
    views: Sequence[EncodedView],
    plan: EvaluationPlan,
    fitter: Fitter | None,
    show_progress: bool,
) -> EvaluationReport:
    config = plan.retrieval
    run = run_retrieval(archive, views, config, fitter=fitter, show_progress=show_progress)
    if run.per_query.empty:
        reasons = "; ".join(f"{what}: {why}" for what, why in run.skipped) or "no findings"
        raise NothingEvaluatedError(
            f"nothing could be evaluated: every finding was skipped ({reasons}). Check the "
            f"splits (query split {config.protocol.query_split!r}, key split "
            f"{config.protocol.key_split!r}), the views ({config.protocol.views!r}) and "
            f"min_queries ({config.protocol.min_queries})"
        )
    pairs = list(dict.fromkeys(table2_pairs(run) + table3_pairs(run)))
    report = EvaluationReport(
        title="",
        command="",
        source="",
        run=run,
        auprc=auprc_table(run, config.intervals),
        differences=difference_table(run, pairs, config.intervals),
        settings={"plan": plan},
    )
    # evaluated findings, most queries first (the curves take the first few; see max_findings)
    evaluated = set(run.per_query["finding"])
    by_queries = run.tasks.sort_values("n_queries", ascending=False, kind="stable")
    findings = [f for f in by_queries["finding"] if f in evaluated]
    common = dict(
        inv_temperature=config.inv_temperature,
        max_block_elements=config.max_block_elements,
        fitter=fitter,
        show_progress=show_progress,
    )
    protocol, intervals = config.protocol, config.intervals
    for name in plan.experiments:
        blocker = experiment_blocker(name, archive, views, plan)
        if blocker:
            report.notes.append(f"Experiment '{name}' skipped: {blocker}.")
        elif name == "mixing":
            report.mixing = mixing_experiment(
                archive, views, plan.mixing, protocol, intervals, **common
            )
        elif name == "budget":
            report.budget = budget_experiment(
                archive, views, plan.budget, protocol, intervals, findings, **common
            )
        elif name == "posterior":
            report.posterior = posterior_experiment(
                archive, views, plan.posterior, protocol, intervals, findings, **common
            )
            report.extra_tables.update(posterior_subspace_table(views, plan, findings, config))
        elif name == "temperature":
            report.temperature = temperature_experiment(
                archive,
                views,
                plan.temperature,
                protocol,
                intervals,
                findings,
                max_block_elements=config.max_block_elements,
                fitter=fitter,
                show_progress=show_progress,
            )
    report.notes.insert(0, temperature_note(views, config.inv_temperature))
    report.extra_tables.update(diagnostic_tables(archive, run))
    for name, frame in (
        ("Anchor budget", report.budget),
        ("Posterior adaptation", report.posterior),
    ):
        if frame is not None and not frame.empty:
            averaged = [f for f in dict.fromkeys(frame["finding"]) if f != "Average"]
            report.notes.append(
                f"{name} curves: {len(averaged)} findings averaged ({', '.join(averaged)}); "
                "the cells of their bands are (checkpoint x random anchor draw)."
            )
            report.notes += frame.attrs.get("skipped", [])
    return report


def experiment_blocker(
    name: str, archive: LabelledArchive, views: Sequence[EncodedView], plan: EvaluationPlan
) -> str | None:
    """Why an experiment cannot run on this data (missing anchors or labels), or None."""
    if name == "mixing":
        if any(plan.mixing.nuisance not in v.anchors.nuisance for v in views):
            found = sorted({k for v in views for k in v.anchors.nuisance}) or ["none"]
            return f"no nuisance anchor set {plan.mixing.nuisance!r} (found: {', '.join(found)})"
        if plan.mixing.nuisance_label not in archive.labels.columns:
            return f"the labels have no nuisance column {plan.mixing.nuisance_label!r}"
    if name == "posterior" and any(v.anchors.broad is None for v in views):
        return "no broad anchor corpus (anchors/broad/...) to use as prior"
    return None


def temperature_note(views: Sequence[EncodedView], inv_temperature: float | None) -> str:
    """One line saying which inverse temperature the anchor geometries used."""
    own = ", ".join(f"{v.inv_temperature:.1f} ({v.encoder_id})" for v in views)
    if inv_temperature is None:
        return (
            "Inverse temperature of the anchor geometries: each encoder's own exp(logit_scale): "
            f"{own}."
        )
    return (
        f"Inverse temperature of the anchor geometries: {inv_temperature:g}, set by "
        f"--inv-temperature (the paper's default is 100); the encoders' own: {own}."
    )


def diagnostic_tables(archive: LabelledArchive, run) -> dict:
    """Per-variant spread of softmax - cosine, and how each finding goes with the projection."""
    import pandas as pd

    tables: dict[str, pd.DataFrame] = {}
    geometries = set(run.per_query["geometry"])
    if {"softmax", "cosine"} <= geometries:
        spread = variant_spread(run.per_query, "softmax", "cosine")
        if not spread.empty:
            tables["Softmax - cosine per anchor variant"] = spread.round(4)
    labels = archive.labels
    if "AP/PA" in labels.columns and any(c.startswith("truth: ") for c in labels.columns):
        rows = []
        view = labels["AP/PA"].astype(str)
        for column in [c for c in labels.columns if c.startswith("truth: ")]:
            present = labels[column].astype(float)
            rows.append(
                {
                    "finding": column.removeprefix("truth: "),
                    **{
                        f"truly present, {v}": round(float(present[view == v].mean()), 3)
                        for v in sorted(view.unique())
                    },
                }
            )
        tables["Findings by projection (truth)"] = pd.DataFrame(rows).set_index("finding")
    return tables


def posterior_subspace_table(views, plan: EvaluationPlan, findings, config) -> dict:
    """The posterior latent subspace (95%-variance rule) against the targets' own PCA."""
    from chexretrieve.evaluation.experiments import _curve_findings

    if any(v.anchors.broad is None for v in views):
        return {}
    chosen = _curve_findings(plan.posterior, findings)
    inv_t = float(config.inv_temperature or views[0].inv_temperature)
    frame = posterior_subspaces(
        views,
        chosen,
        plan.posterior.target_counts,
        plan.posterior.repeats,
        plan.posterior.seed,
        inv_temperature=inv_t,
    )
    return {"Posterior latent subspace (k by the 95% rule)": frame.round(4).set_index("n_targets")}
