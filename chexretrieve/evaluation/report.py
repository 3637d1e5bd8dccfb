"""Write an evaluation report folder: CSV tables, PNG figures, report.md and a self-contained HTML.

Layout of ``OUT/``::

    report.md  report.html  manifest.json
    queries.csv             every (finding, query): store/archive id, data-set path or id (image),
                            patient, study, view, split
    keys.csv                every key image (same columns) and its relevance label per finding
                            (1 relevant, 0 not, blank: not a key for that finding)
    tables/    data.csv  auprc.csv  differences.csv  table2.csv  table3.csv  auprc_wide.csv
               mixing.csv  budget.csv  posterior.csv  temperature.csv  runtime.csv  (those run)
    per_query_ap.csv.gz     every (finding, checkpoint, variant, geometry, query) AP, with the
                            query's data-set path or id (image) and patient
    figures/   *.png        (also embedded in report.html as base64)
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from chexretrieve import strict_json
from chexretrieve.evaluation import figures as F
from chexretrieve.evaluation.multiplicity import verdict_counts
from chexretrieve.evaluation.runner import RetrievalRun
from chexretrieve.evaluation.runtime import runtime_table
from chexretrieve.evaluation.spread import spread_markdown_frame
from chexretrieve.evaluation.tables import (
    auprc_wide,
    difference_wide,
    display_name,
    to_html,
    to_markdown,
)

PROTOCOL_NOTE = (
    "Keys are the key-split images with the finding's uncertain labels handled by `uncertain_as` "
    "(default: dropped) and blanks by `blank_as` (default: negative); queries are the query-split "
    "images labelled positive; a key is relevant when it is positive. AUPRC is the average "
    "precision of each query's ranked key list, averaged over queries: scikit-learn's "
    "`average_precision_score` on the computed scores, exact ties included (near-ties that "
    "differ only by floating-point rounding are not ties)."
)
INTERVAL_NOTE = (
    "Each entry averages per-query AP (or paired per-query AP differences) over (anchor variant x "
    "checkpoint) cells and queries. 95% intervals: B bootstrap replicates; each replicate draws "
    "the "
    "cells with replacement and the queries with replacement (one query draw shared by all cells: "
    "the same validation images are every cell's queries) and takes the mean; percentile interval. "
    "Average rows weight findings equally and share each replicate's cell draw across findings. "
    "Differences above +0.005 are bold, below -0.005 bold red (HTML, terminal), otherwise grey."
)


@dataclass
class EvaluationReport:
    """Everything one report shows; empty parts are left out of the page."""

    title: str
    command: str  # the exact command line that produced the report
    source: str  # one line: where the images, labels and checkpoints came from
    run: RetrievalRun | None = None
    auprc: pd.DataFrame | None = None  # summaries.auprc_table
    differences: pd.DataFrame | None = None  # summaries.difference_table, Table 2 + 3 pairs
    mixing: pd.DataFrame | None = None
    budget: pd.DataFrame | None = None
    posterior: pd.DataFrame | None = None
    temperature: pd.DataFrame | None = None  # temperature.temperature_experiment
    runtime: pd.DataFrame | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # config dataclasses, for the manifest
    notes: list[str] = field(default_factory=list)  # extra paragraphs (e.g. natural-image protocol)
    extra_tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # title -> table
    protocol: str = ""  # the Protocol paragraph from the settings used (protocol_text); "": generic
    interval_text: str = ""  # the Intervals paragraph likewise
    spread: pd.DataFrame | None = None  # spread.spread_summary over world seeds x encoders
    spread_cells: pd.DataFrame | None = None  # spread.spread_cells of every (world, encoder)
    provenance: dict[str, Any] = field(default_factory=dict)  # provenance.py; manifest's block


def table2_frames(report: EvaluationReport):
    diffs = report.differences
    if diffs is None or diffs.empty or report.run is None:
        return pd.DataFrame(), pd.DataFrame()
    part = diffs[(diffs["geometry"] == "softmax") & diffs["reference"].isin(["cosine", "iti"])]
    return difference_wide(part, report.run.tasks, by="reference")


def table3_frames(report: EvaluationReport):
    diffs = report.differences
    if diffs is None or diffs.empty or report.run is None:
        return pd.DataFrame(), pd.DataFrame()
    part = diffs[(diffs["reference"] == "cosine") & (diffs["geometry"] != "iti")]
    return difference_wide(part, report.run.tasks, by="geometry")


def _figures(report: EvaluationReport, folder: Path) -> list[tuple[str, str, bytes]]:
    """(file name, caption, png bytes) of every figure the report's data allow."""
    out = []

    def add(name: str, caption: str, fig) -> None:
        out.append((name, caption, F.save_figure(fig, folder / name)))

    diffs = report.differences
    if diffs is not None and not diffs.empty:
        t2 = diffs[diffs["geometry"] == "softmax"]
        for ref in ("cosine", "iti"):
            if (t2["reference"] == ref).any():
                add(
                    f"table2_softmax_vs_{ref}.png",
                    f"Softmax anchor divergence minus {F.label(ref)}: per-finding AUPRC "
                    "difference.",
                    F.difference_forest(t2, ref, f"Softmax − {F.label(ref)} (Table 2)"),
                )
        t3 = diffs[(diffs["reference"] == "cosine") & (diffs["geometry"] != "iti")]
        if not t3.empty:
            add(
                "table3_models_vs_cosine.png",
                "Every anchor geometry minus cosine: per-finding AUPRC difference.",
                F.difference_forest(t3, "cosine", "Anchor geometries − Cosine (Table 3)"),
            )
    if report.mixing is not None and not report.mixing.empty:
        add(
            "fig3_mixing.png",
            "Mixing finding anchors with nuisance anchors: AUPRC of each coordinate vs p (Fig. 3).",
            F.mixing_curves(report.mixing, "Anchor mixing selects the coordinate"),
        )
    if report.budget is not None and not report.budget.empty:
        avg = report.budget[report.budget["finding"] == "Average"]
        add(
            "fig4_budget.png",
            "AUPRC vs number of anchors, mean over findings with 95% bands (Fig. 4).",
            F.budget_curves(avg if not avg.empty else report.budget, "Anchor budget"),
        )
    if report.posterior is not None and not report.posterior.empty:
        avg = report.posterior[report.posterior["finding"] == "Average"]
        add(
            "fig5_posterior.png",
            "Target-only (dotted) vs posterior models adapted from the broad corpus (solid), "
            "Fig. 5.",
            F.budget_curves(
                avg if not avg.empty else report.posterior,
                "Posterior adaptation",
                xlabel="number of target anchors",
            ),
        )
    if report.temperature is not None and not report.temperature.empty:
        add(
            "fig_temperature.png",
            "Mean AUPRC of each geometry against the inverse temperature inv_t (left) and "
            "against inv_t x the spread of image-anchor cosines (right); the vertical lines mark "
            "the encoder's own inv_t (solid) and the paper's 100 (dashed).",
            F.temperature_curves(report.temperature, "Inverse temperature"),
        )
    if report.runtime is not None and not report.runtime.empty:
        r = report.runtime.iloc[0]
        add(
            "table4_runtime.png",
            "Retrieval time vs number of anchors (Table 4).",
            F.runtime_curves(
                report.runtime,
                f"{int(r['n_queries'])} queries x {int(r['n_gallery'])} gallery, {r['device']}",
            ),
        )
    return out


def _curve_markdown(frame: pd.DataFrame, x: str) -> str:
    avg = frame[frame["finding"] == "Average"] if "finding" in frame else frame
    if avg.empty:
        avg = frame
    wide = avg.assign(cell=[f"{m:.3f}" for m in avg["mean"]]).pivot_table(
        index=x, columns="geometry", values="cell", aggfunc="first"
    )
    return to_markdown(wide.rename_axis("n anchors"))


def _sections(report: EvaluationReport) -> list[tuple[str, str, Any]]:
    """(heading, kind, payload) in page order; kind: text | table | frame."""
    s: list[tuple[str, str, Any]] = []
    run = report.run
    if report.spread is not None and not report.spread.empty:
        s.append(
            (
                "Headline: mean [smallest, largest] over world seeds x encoders",
                "frame",
                spread_markdown_frame(report.spread, display_name),
            )
        )
    if run is not None:
        data = run.tasks.rename(
            columns={
                "n_queries": "n queries",
                "n_keys": "n keys",
                "n_relevant_keys": "relevant keys",
            }
        ).set_index("finding")
        data["prevalence"] = data["prevalence"].map(lambda v: f"{v:.3f}")
        s.append(("Data per finding", "frame", data))
        s.append(
            ("Table 2: softmax anchor divergence vs cosine and ITI", "table", table2_frames(report))
        )
        s.append(("Table 3: anchor geometries vs cosine", "table", table3_frames(report)))
        verdicts = verdict_frames(report)
        if verdicts is not None:
            s.append((VERDICT_HEADING, "text", VERDICT_NOTE))
            s.append(("Verdict counts per comparison", "frame", verdicts[1]))
            s.append(("Per-finding verdicts", "frame", verdicts[0]))
        if report.auprc is not None and not report.auprc.empty:
            s.append(("AUPRC per geometry", "frame", auprc_wide(report.auprc, run.tasks)))
        if run.skipped:
            s.append(("Skipped", "text", "; ".join(f"{what}: {why}" for what, why in run.skipped)))
        notes = _interval_notes(report)
        if notes:
            s.append(("Interval notes", "text", "; ".join(notes)))
    for title, table in report.extra_tables.items():
        s.append((title, "frame", table))
    if report.mixing is not None and not report.mixing.empty:
        m = report.mixing.assign(cell=[f"{v:.3f}" for v in report.mixing["mean"]])
        wide = m.pivot_table(
            index="p", columns=["finding", "coordinate"], values="cell", aggfunc="first"
        )
        wide.columns = [f"{f}: {c}" for f, c in wide.columns]
        s.append(("Anchor mixing (Fig. 3): AUPRC vs p", "frame", wide))
    if report.budget is not None and not report.budget.empty:
        s.append(
            (
                "Anchor budget (Fig. 4): mean AUPRC",
                "text",
                _curve_markdown(report.budget, "n_anchors"),
            )
        )
    if report.posterior is not None and not report.posterior.empty:
        s.append(
            (
                "Posterior adaptation (Fig. 5): mean AUPRC",
                "text",
                _curve_markdown(report.posterior, "n_anchors"),
            )
        )
    if report.temperature is not None and not report.temperature.empty:
        t = report.temperature.assign(cell=[f"{v:.3f}" for v in report.temperature["mean"]])
        wide = t.pivot_table(
            index=["inv_temperature", "sharpness"], columns="geometry", values="cell",
            aggfunc="first",
        )  # fmt: skip
        wide.index = [f"{a:g} (x spread = {b:.2f})" for a, b in wide.index]
        s.append(("Inverse temperature: mean AUPRC", "frame", wide.rename_axis("inv_t")))
    if report.runtime is not None and not report.runtime.empty:
        t4 = runtime_table(report.runtime).map(lambda v: f"{v:.3f}")
        s.append(("Table 4: seconds vs number of anchors", "frame", t4))
    return s


VERDICT_HEADING = "Per-finding verdicts (exploratory; Holm-adjusted over the findings)"
VERDICT_NOTE = (
    "Exploratory. Each cell is one finding's verdict on one comparison after Holm's adjustment "
    "over the findings of that comparison (family-wise error 0.05): 'holds' (the geometry is "
    "better), 'reversed' (the reference is better) or 'not shown'; the adjusted p-value in "
    "brackets. The p-values are the bootstrap p-values of the per-finding intervals (twice the "
    "smaller share of replicates on either side of 0). An interval excluding 0 in Tables 2-3 is "
    "an unadjusted, per-finding reading; the Average rows are the comparisons' headline figures "
    "and are not adjusted. Columns: differences from `tables/differences.csv` (p_value, p_holm, "
    "verdict)."
)


def verdict_frames(report: EvaluationReport) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(finding x comparison verdict cells, counts per comparison), or None without verdicts."""
    diffs = report.differences
    if diffs is None or diffs.empty or "verdict" not in diffs.columns:
        return None
    per_finding = diffs[diffs["finding"] != "Average"]
    if per_finding.empty:
        return None
    label = [
        f"{display_name(g)} − {display_name(r)}"
        for g, r in zip(per_finding["geometry"], per_finding["reference"], strict=True)
    ]
    cell = [
        "n/a" if v == "n/a" else f"{v} ({p:.3f})"
        for v, p in zip(per_finding["verdict"], per_finding["p_holm"], strict=True)
    ]
    frame = per_finding.assign(column=label, cell=cell)
    order = list(dict.fromkeys(frame["finding"]))
    columns = list(dict.fromkeys(frame["column"]))
    wide = frame.pivot(index="finding", columns="column", values="cell")
    wide = wide.reindex(index=order, columns=columns).fillna("-")
    counts = verdict_counts(diffs)
    counts.insert(
        0,
        "comparison",
        [
            f"{display_name(g)} − {display_name(r)}"
            for g, r in zip(counts.pop("geometry"), counts.pop("reference"), strict=True)
        ],
    )
    return wide, counts.set_index("comparison")


def _interval_notes(report: EvaluationReport) -> list[str]:
    """Why an entry has no interval ("n/a"), once per finding and reason."""
    found: dict[str, None] = {}
    for frame in (report.auprc, report.differences):
        if frame is None or frame.empty or "interval_note" not in frame.columns:
            continue
        for finding, note in zip(frame["finding"], frame["interval_note"], strict=True):
            if isinstance(note, str) and note:
                found[f"{finding}: {note}"] = None
    return list(found)


def _protocol_lines(report: EvaluationReport) -> tuple[str, str]:
    return report.protocol or PROTOCOL_NOTE, report.interval_text or INTERVAL_NOTE


def _frame_markdown(frame: pd.DataFrame) -> str:
    return to_markdown(frame.astype(str))


def render_markdown(report: EvaluationReport, figures: list[tuple[str, str, bytes]]) -> str:
    lines = [
        f"# {report.title}",
        "",
        f"Command: `{report.command}`",
        "",
        f"Source: {report.source}",
        "",
    ]
    if report.run is not None:
        lines += [f"Checkpoints: {', '.join(report.run.checkpoints)}", ""]
    protocol, intervals = _protocol_lines(report)
    lines += [f"Protocol: {protocol}", "", f"Intervals: {intervals}", ""]
    lines += [p + "\n" for p in report.notes]
    for heading, kind, payload in _sections(report):
        lines.append(f"## {heading}\n")
        if kind == "table":
            text, means = payload
            lines.append(to_markdown(text, means))
        elif kind == "frame":
            lines.append(_frame_markdown(payload))
        else:
            lines.append(str(payload) + "\n")
    if figures:
        lines.append("## Figures\n")
        for name, caption, _ in figures:
            lines += [f"![{caption}](figures/{name})", "", f"*{caption}*", ""]
    return "\n".join(lines)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.85em}
th,td{border:1px solid #ccc;padding:0.25em 0.5em;text-align:right}
th:first-child{text-align:left}
code{background:#f4f4f4;padding:0.1em 0.3em}
figure{margin:1.5em 0}
figcaption{font-style:italic;color:#555}
img{max-width:100%}
"""


def _inline_code(text: str) -> str:
    """Escape for HTML and turn Markdown `code` spans into <code> elements."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def render_html(report: EvaluationReport, figures: list[tuple[str, str, bytes]]) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{e(report.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(report.title)}</h1>",
        f"<p>Command: <code>{e(report.command)}</code></p>",
        f"<p>Source: {e(report.source)}</p>",
    ]
    if report.run is not None:
        parts.append(f"<p>Checkpoints: {e(', '.join(report.run.checkpoints))}</p>")
    parts += [
        f"<p>Protocol: {_inline_code(_protocol_lines(report)[0])}</p>",
        f"<p>Intervals: {_inline_code(_protocol_lines(report)[1])}</p>",
    ]
    parts += [f"<p>{_inline_code(p)}</p>" for p in report.notes]
    for heading, kind, payload in _sections(report):
        parts.append(f"<h2>{e(heading)}</h2>")
        if kind == "table":
            text, means = payload
            parts.append(to_html(text, means))
        elif kind == "frame":
            parts.append(to_html(payload.astype(str)))
        else:
            parts.append(f"<pre>{e(str(payload))}</pre>")
    if figures:
        parts.append("<h2>Figures</h2>")
        for name, caption, data in figures:
            b64 = base64.b64encode(data).decode("ascii")
            parts.append(
                f"<figure><img alt='{e(caption)}' src='data:image/png;base64,{b64}'>"
                f"<figcaption>{e(caption)} ({e(name)})</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def _named_per_query(run: RetrievalRun) -> pd.DataFrame:
    """Per-query AP with each query's data-set path or id and patient beside its archive id."""
    per_query = run.per_query
    if run.queries.empty or per_query.empty:
        return per_query
    names = run.queries.drop_duplicates("query").set_index("query")
    keep = [c for c in ("image", "patient") if c in names.columns]
    named = per_query.join(names[keep], on="query")
    order = ["finding", "checkpoint", "variant", "geometry", "query", *keep, "ap"]
    return named[order + [c for c in named.columns if c not in order]]


def refuse_existing_report(out: Path) -> None:
    """FileExistsError when ``out`` already holds something: reports are never overwritten."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out} exists already and a report folder is never overwritten: give a new --out, "
            "or move the old folder away first"
        )


def fresh_report_folder(base: Path) -> Path:
    """``base`` when it is free, else ``base-2``, ``base-3``, ... (a default report folder)."""
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def choose_report_folder(out: Path | None, default: Path) -> Path:
    """The folder a command writes its report to: ``out`` when it is new or empty
    (FileExistsError otherwise, raised before any work), else a fresh ``default`` (``-2``, ...)."""
    if out is None:
        return fresh_report_folder(default)
    refuse_existing_report(Path(out))
    return Path(out)


def write_report(report: EvaluationReport, out_dir: str | Path) -> dict[str, Path]:
    """Write the report folder; returns the main paths (markdown, html, manifest, tables...).

    A report folder is never overwritten: FileExistsError when ``out_dir`` exists and is not empty
    (``fresh_report_folder`` picks a new name for a default folder)."""
    out = Path(out_dir)
    refuse_existing_report(out)
    tables = out / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    run = report.run
    if run is not None:
        run.tasks.to_csv(tables / "data.csv", index=False)
        _named_per_query(run).to_csv(out / "per_query_ap.csv.gz", index=False, compression="gzip")
        if not run.queries.empty:
            run.queries.to_csv(out / "queries.csv", index=False)
        if not run.keys.empty:
            run.keys.to_csv(out / "keys.csv", index=False)
        for name, (text, _) in (
            ("table2", table2_frames(report)),
            ("table3", table3_frames(report)),
        ):
            if not text.empty:
                text.to_csv(tables / f"{name}.csv")
    frames = {
        "auprc": report.auprc,
        "differences": report.differences,
        "mixing": report.mixing,
        "budget": report.budget,
        "posterior": report.posterior,
        "temperature": report.temperature,
        "runtime": report.runtime,
    }
    for name, frame in frames.items():
        if frame is not None and not frame.empty:
            frame.to_csv(tables / f"{name}.csv", index=False)
    if report.auprc is not None and run is not None and not report.auprc.empty:
        auprc_wide(report.auprc, run.tasks).to_csv(tables / "auprc_wide.csv")
    for title, frame in report.extra_tables.items():
        slug = "".join(c if c.isalnum() else "_" for c in title.lower()).strip("_")
        frame.to_csv(tables / f"{slug}.csv")
    for name, frame in (("spread", report.spread), ("spread_cells", report.spread_cells)):
        if frame is not None and not frame.empty:
            frame.to_csv(tables / f"{name}.csv", index=False)
    verdicts = verdict_frames(report)
    if verdicts is not None:
        verdicts[1].to_csv(tables / "verdict_counts.csv")
    figures = _figures(report, out / "figures")
    (out / "report.md").write_text(render_markdown(report, figures), encoding="utf-8")
    (out / "report.html").write_text(render_html(report, figures), encoding="utf-8")
    manifest = {
        "title": report.title,
        "command": report.command,
        "source": report.source,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "checkpoints": run.checkpoints if run else [],
        "skipped": run.skipped if run else [],
        "settings": report.settings,
        "figures": [name for name, _, _ in figures],
    }
    if report.provenance:
        manifest["provenance"] = report.provenance
    (out / "manifest.json").write_text(strict_json.dumps(manifest, indent=2), encoding="utf-8")
    return {
        "markdown": out / "report.md",
        "html": out / "report.html",
        "manifest": out / "manifest.json",
        "tables": tables,
        "figures": out / "figures",
    }
