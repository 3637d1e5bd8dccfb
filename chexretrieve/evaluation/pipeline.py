"""One evaluation report from an archive and its encoder views: tables, experiments, figures.

The CLI (``chexretrieve eval retrieval``) picks a source and calls :func:`evaluate`; tests and
notebooks can call it with any archive and views.
"""

from __future__ import annotations

from collections.abc import Sequence

from chexretrieve.evaluation.config import EvaluationPlan
from chexretrieve.evaluation.experiments import (
    budget_experiment,
    mixing_experiment,
    posterior_experiment,
)
from chexretrieve.evaluation.geometries import Fitter
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.protocol import LabelledArchive
from chexretrieve.evaluation.report import EvaluationReport
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.runtime import time_retrieval
from chexretrieve.evaluation.summaries import (
    auprc_table,
    difference_table,
    table2_pairs,
    table3_pairs,
)


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
) -> EvaluationReport:
    """Run the tables and every experiment of ``plan``; an experiment that cannot run on this
    data (no nuisance anchors, no broad corpus) is skipped with a note in the report."""
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    with threadpool_limits(plan.blas_threads):
        report = _tables_and_curves(archive, views, plan, fitter, show_progress)
    report.title, report.command, report.source = title, command, source
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
