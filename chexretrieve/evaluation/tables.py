"""The report's tables in the paper's layouts: wide frames, Markdown, rich and HTML renderings.

* Table 2 layout: one row per finding (and "Average"), columns "Softmax - Cosine" and
  "Softmax - ITI", each "mean [low, high]", plus n queries, n keys and prevalence.
* Table 3 layout: one row per finding, one column per anchor geometry (difference to cosine).
* AUPRC table: absolute mean AUPRC per finding and geometry.

Colours follow the paper: a difference above +0.005 is bold (green in rich/HTML), within +-0.005
grey, below -0.005 bold red.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from chexretrieve.evaluation.geometries import DISPLAY_NAMES
from chexretrieve.evaluation.summaries import AVERAGE, significance

COUNT_COLUMNS = ("n queries", "n keys", "prevalence")


def display_name(name: str) -> str:
    head = name.split(":")[0]
    return DISPLAY_NAMES.get(head, head) + (f" ({name.split(':', 1)[1]})" if ":" in name else "")


def _fmt(mean: float, low: float, high: float, signed: bool) -> str:
    if np.isnan(mean):
        return "-"
    s = "+" if signed else ""
    if np.isnan(low) or np.isnan(high):  # too few patients: the reason is in the report's notes
        return f"{mean:{s}.3f} [n/a]"
    return f"{mean:{s}.3f} [{low:{s}.3f}, {high:{s}.3f}]"


def _counts(tasks: pd.DataFrame) -> pd.DataFrame:
    out = tasks.set_index("finding")[["n_queries", "n_keys", "prevalence"]].copy()
    out.columns = list(COUNT_COLUMNS)
    return out


def difference_wide(
    diffs: pd.DataFrame, tasks: pd.DataFrame, *, by: str = "reference"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(text table, numeric means) with findings as rows.

    ``by="reference"`` gives one column per reference (Table 2), ``by="geometry"`` one per geometry
    (Table 3).
    """
    if diffs.empty:
        return pd.DataFrame(), pd.DataFrame()
    other = "geometry" if by == "reference" else "reference"
    label = diffs.apply(
        lambda r: (
            f"{display_name(r[other])} − {display_name(r['reference'])}"
            if by == "reference"
            else display_name(r["geometry"])
        ),
        axis=1,
    )
    frame = diffs.assign(column=label)
    order = list(dict.fromkeys(frame["finding"]))
    columns = list(dict.fromkeys(frame["column"]))
    text = frame.assign(
        cell=[
            _fmt(m, lo, hi, True)
            for m, lo, hi in zip(frame["mean"], frame["low"], frame["high"], strict=True)
        ]
    ).pivot(index="finding", columns="column", values="cell")
    means = frame.pivot(index="finding", columns="column", values="mean")
    text, means = (
        text.reindex(index=order, columns=columns),
        means.reindex(index=order, columns=columns),
    )
    counts = _counts(tasks).reindex(order)
    text = text.join(counts.astype(object))
    text["prevalence"] = [
        "" if f == AVERAGE or pd.isna(p) else f"{p:.3f}"
        for f, p in zip(text.index, counts["prevalence"], strict=True)
    ]
    for col in ("n queries", "n keys"):
        text[col] = ["" if pd.isna(v) else str(int(v)) for v in counts[col]]
    return text, means


def auprc_wide(table: pd.DataFrame, tasks: pd.DataFrame) -> pd.DataFrame:
    """Absolute AUPRC, findings as rows and geometries as columns."""
    frame = table.assign(column=[display_name(g) for g in table["geometry"]])
    order = list(dict.fromkeys(frame["finding"]))
    columns = list(dict.fromkeys(frame["column"]))
    text = frame.assign(
        cell=[
            _fmt(m, lo, hi, False)
            for m, lo, hi in zip(frame["mean"], frame["low"], frame["high"], strict=True)
        ]
    ).pivot(index="finding", columns="column", values="cell")
    return text.reindex(index=order, columns=columns)


def to_markdown(text: pd.DataFrame, means: pd.DataFrame | None = None) -> str:
    """A GitHub Markdown table; significant differences bold (the paper's rule, no colour)."""
    if text.empty:
        return "_no rows_\n"
    header = [str(text.index.name or "finding"), *map(str, text.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for finding, row in text.iterrows():
        cells = [f"**{finding}**" if finding == AVERAGE else str(finding)]
        for col, value in row.items():
            mark = _mark(means, finding, col)
            cells.append(f"**{value}**" if mark in ("better", "worse") else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _mark(means: pd.DataFrame | None, finding, col) -> str | None:
    if means is None or col not in means.columns:
        return None
    value = means.loc[finding, col]
    return None if pd.isna(value) else significance(float(value))


_HTML_STYLE = {
    "better": "font-weight:bold",
    "worse": "font-weight:bold;color:#b00020",
    "flat": "color:#888",
}


def to_html(text: pd.DataFrame, means: pd.DataFrame | None = None) -> str:
    """An HTML table with the paper's colour rule applied to difference cells."""
    if text.empty:
        return "<p><em>no rows</em></p>"
    first = str(text.index.name or "finding")
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in [first, *text.columns])
    body = []
    for finding, row in text.iterrows():
        cells = [f"<th>{html.escape(str(finding))}</th>"]
        for col, value in row.items():
            mark = _mark(means, finding, col)
            style = f' style="{_HTML_STYLE[mark]}"' if mark else ""
            cells.append(f"<td{style}>{html.escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_RICH_STYLE = {"better": "bold green", "worse": "bold red", "flat": "grey50"}


def to_rich(
    text: pd.DataFrame, means: pd.DataFrame | None = None, title: str = "", compact: bool = False
):
    """A rich Table for the terminal; ``compact`` shows the means only (intervals in the report)."""
    from rich.table import Table

    if compact and means is not None:
        text = text.copy()
        for col in means.columns:
            text[col] = [
                f"{v:+.3f}" if pd.notna(v) else "-" for v in means[col].reindex(text.index)
            ]

    table = Table(title=title, show_lines=False)
    table.add_column("finding", style="bold")
    for col in text.columns:
        table.add_column(str(col), justify="right")
    for finding, row in text.iterrows():
        cells = []
        for col, value in row.items():
            mark = _mark(means, finding, col)
            cells.append(f"[{_RICH_STYLE[mark]}]{value}[/]" if mark else str(value))
        table.add_row(str(finding), *cells, end_section=finding == AVERAGE)
    return table
