"""Headline numbers over the sources of randomness a single draw hides: world seeds x encoders.

The report's tables measure one evaluation world, their intervals resampling anchor variants,
encoders (checkpoints) and patients of that world. The phantom world adds two sources a reader of
one draw cannot see: which world was drawn, and which training run produced the encoder. This module
puts every (world, encoder) pair side by side:

* ``spread_cells``: for one run (one world, any number of encoders), per encoder the equal-weight
  average over findings of each geometry's mean AUPRC and of each compared pair's mean paired
  difference (the Average row of Tables 2-3, restricted to that encoder);
* ``spread_summary``: per quantity the mean, standard deviation, smallest and largest value over
  all (world, encoder) cells, and how many cells lie above zero.

A quantity is only averaged over findings when the encoder has every evaluated finding for it (as
the Average row), so the cells compare.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from chexretrieve.evaluation.runner import RetrievalRun

#: the columns of spread_cells
CELL_COLUMNS = ("world", "checkpoint", "geometry", "reference", "value")


def _finding_means(per_query: pd.DataFrame) -> pd.DataFrame:
    """finding x geometry: the mean per-query AP over variants and queries."""
    return per_query.groupby(["finding", "geometry"])["ap"].mean().unstack("geometry")


def spread_cells(
    run: RetrievalRun, world: int | str, pairs: Sequence[tuple[str, str]]
) -> pd.DataFrame:
    """One row per (encoder, quantity) of one run: reference "" is a geometry's mean AUPRC; a
    reference geometry makes it the mean paired difference geometry - reference."""
    rows = []
    findings = list(dict.fromkeys(run.per_query["finding"]))
    for checkpoint in run.checkpoints:
        part = run.per_query[run.per_query["checkpoint"] == checkpoint]
        means = _finding_means(part).reindex(findings)
        present = means.columns[means.notna().all()]
        complete = [s.name for s in run.geometries if s.name in present]
        for geometry in complete:
            value = float(means[geometry].mean())
            rows.append((world, checkpoint, geometry, "", value))
        for geometry, reference in pairs:
            if geometry in complete and reference in complete:
                value = float((means[geometry] - means[reference]).mean())
                rows.append((world, checkpoint, geometry, reference, value))
    return pd.DataFrame(rows, columns=list(CELL_COLUMNS))


def spread_summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (geometry, reference): mean, sd, min and max over the (world, encoder) cells, the
    number of cells, worlds and encoders, and the cells above zero (for a difference)."""
    rows = []
    for (geometry, reference), part in cells.groupby(["geometry", "reference"], sort=False):
        values = part["value"].to_numpy(dtype=float)
        rows.append(
            {
                "geometry": geometry,
                "reference": reference,
                "mean": float(values.mean()),
                "sd": float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
                "min": float(values.min()),
                "max": float(values.max()),
                "n_cells": int(len(values)),
                "n_worlds": int(part["world"].nunique()),
                "n_encoders": int(part["checkpoint"].nunique()),
                "cells_above_0": int((values > 0).sum()) if reference else -1,
            }
        )
    return pd.DataFrame(rows)


def spread_markdown_frame(summary: pd.DataFrame, display) -> pd.DataFrame:
    """The summary as the report shows it: one row per quantity, "mean [min, max]" and counts."""
    if summary.empty:
        return pd.DataFrame()
    out = []
    for row in summary.itertuples(index=False):
        label = (
            f"{display(row.geometry)} − {display(row.reference)}"
            if row.reference
            else f"AUPRC {display(row.geometry)}"
        )
        sign = "+" if row.reference else ""
        out.append(
            {
                "quantity": label,
                "mean [min, max]": (
                    f"{row.mean:{sign}.3f} [{row.min:{sign}.3f}, {row.max:{sign}.3f}]"
                ),
                "sd": "" if np.isnan(row.sd) else f"{row.sd:.3f}",
                "cells above 0": (f"{row.cells_above_0} of {row.n_cells}" if row.reference else ""),
                "worlds x encoders": f"{row.n_worlds} x {row.n_encoders}",
            }
        )
    return pd.DataFrame(out).set_index("quantity")


def add_spread(report, worlds: Sequence[int], load_world, plan, show_progress: bool) -> None:
    """Fill ``report.spread_cells``/``spread`` from the report's own run (world ``worlds[0]``)
    and the Tables 2-3 runs of the other worlds (``load_world(seed)`` -> (archive, views)), with the
    same retrieval settings; a note in the report says what the headline table averages."""
    from threadpoolctl import threadpool_limits

    from chexretrieve.evaluation.runner import run_retrieval
    from chexretrieve.evaluation.summaries import table2_pairs, table3_pairs

    pairs = list(dict.fromkeys(table2_pairs(report.run) + table3_pairs(report.run)))
    cells = [spread_cells(report.run, worlds[0], pairs)]
    findings = set(report.run.per_query["finding"])
    for seed in worlds[1:]:
        archive, views = load_world(seed)
        with threadpool_limits(plan.blas_threads):
            run = run_retrieval(archive, views, plan.retrieval, show_progress=show_progress)
        missing = findings - set(run.per_query["finding"])
        if missing:  # its averages would be over other findings: not comparable
            report.notes.append(
                f"Headline table: world {seed} is left out: {', '.join(sorted(missing))} could "
                "not be evaluated there (see its skipped reasons with --phantom-seed "
                f"{seed})."
            )
            continue
        run.per_query = run.per_query[run.per_query["finding"].isin(findings)]
        cells.append(spread_cells(run, seed, pairs))
    report.spread_cells = pd.concat(cells, ignore_index=True)
    report.spread = spread_summary(report.spread_cells)
    encoders = ", ".join(report.run.checkpoints)
    report.notes.append(
        f"Headline table: each quantity's equal-weight average over findings, computed for every "
        f"pair of phantom world ({', '.join(str(w) for w in worlds)}; each with the same size, "
        f"protocol and anchor sets) and independently trained encoder ({encoders}); the mean over "
        "those cells with the smallest and largest cell, the cells' standard deviation, and how "
        "many cells lie above 0. Tables 2-3 below and their intervals are world "
        f"{worlds[0]} alone (anchor variants, encoders and patients resampled). Every cell is in "
        "`tables/spread_cells.csv`."
    )
