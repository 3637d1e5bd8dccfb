"""Figures of the evaluation report (matplotlib, Agg backend): differences, curves, runtime.

Every function takes a tidy frame, draws one figure and returns it; ``save_figure`` writes a PNG and
returns its bytes for embedding in the HTML page. Intervals are drawn as error bars or bands.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from chexretrieve.evaluation.geometries import DISPLAY_NAMES  # noqa: E402

_COLOURS = {
    "cosine": "#555555",
    "iti": "#8c564b",
    "softmax": "#1f77b4",
    "gaussian": "#ff7f0e",
    "latent_gaussian": "#2ca02c",
    "latent_spherical": "#d62728",
    "gmm": "#9467bd",
    "movmf": "#17becf",
}


def colour(name: str) -> str:
    return _COLOURS.get(name.split(":")[0].removeprefix("posterior_"), "#333333")


def label(name: str) -> str:
    """Display name of a geometry spec, with its options ("Posterior latent spherical (k=32)")."""
    head, _, options = name.partition(":")
    base = DISPLAY_NAMES.get(head, head)
    return f"{base} ({options})" if options else base


def save_figure(fig, path: Path) -> bytes:
    """Write ``fig`` as PNG to ``path`` and return the PNG bytes; closes the figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def difference_forest(diffs: pd.DataFrame, reference: str, title: str):
    """Per finding, mean AUPRC difference to ``reference`` with 95% interval bars, per geometry."""
    rows = diffs[diffs["reference"] == reference]
    findings = list(dict.fromkeys(rows["finding"]))
    geometries = list(dict.fromkeys(rows["geometry"]))
    height = max(3.0, 0.42 * len(findings) * max(1, len(geometries)) ** 0.5 + 1.2)
    fig, ax = plt.subplots(figsize=(7.5, height))
    step = 0.8 / max(len(geometries), 1)
    for g_i, geometry in enumerate(geometries):
        sub = rows[rows["geometry"] == geometry].set_index("finding").reindex(findings)
        y = np.arange(len(findings)) + (g_i - (len(geometries) - 1) / 2) * step
        err = np.vstack([sub["mean"] - sub["low"], sub["high"] - sub["mean"]])
        ax.errorbar(
            sub["mean"],
            y,
            xerr=err,
            fmt="s" if geometry.startswith("posterior_") else "o",  # posterior twins: squares
            ms=4,
            mfc="white" if geometry.startswith("posterior_") else None,
            capsize=2,
            color=colour(geometry),
            label=f"{label(geometry)} − {label(reference)}",
        )
    ax.axvline(0.0, color="black", lw=0.8)
    ax.axvspan(-0.005, 0.005, color="#dddddd", zorder=0)
    ax.set_yticks(np.arange(len(findings)))
    ax.set_yticklabels(findings)
    ax.invert_yaxis()
    ax.set_xlabel("AUPRC difference (mean, 95% interval)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    return fig


def mixing_curves(frame: pd.DataFrame, title: str):
    """AUPRC per coordinate vs the finding-anchor weight p (paper Fig. 3), a panel per finding."""
    findings = list(dict.fromkeys(frame["finding"]))
    fig, axes = plt.subplots(1, len(findings), figsize=(4.6 * len(findings), 3.6), squeeze=False)
    for ax, finding in zip(axes[0], findings, strict=True):
        sub = frame[frame["finding"] == finding]
        for c_i, (coordinate, part) in enumerate(sub.groupby("coordinate", sort=False)):
            part = part.sort_values("p")
            col = ["#1f77b4", "#d62728", "#2ca02c"][c_i % 3]
            ax.plot(
                part["p"], part["mean"], marker="o", color=col, label=f"relevance: {coordinate}"
            )
            ax.fill_between(part["p"], part["low"], part["high"], color=col, alpha=0.2)
        ax.set_xlabel("weight p of the finding anchors (1 − p: nuisance anchors)")
        ax.set_ylabel("AUPRC")
        ax.set_title(finding)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def budget_curves(frame: pd.DataFrame, title: str, *, x: str = "n_anchors", xlabel: str = ""):
    """Mean AUPRC vs number of anchors per geometry with bands; cosine as a dashed line."""
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    variants_drawn: dict[str, int] = {}  # geometry without options -> curves drawn so far
    for geometry, part in frame.groupby("geometry", sort=False):
        part = part.sort_values(x)
        posterior = geometry.startswith("posterior_")
        if geometry == "cosine":
            ax.axhline(part["mean"].mean(), color=colour(geometry), ls="--", label="Cosine")
            continue
        # with posterior models present, target-only curves are dotted (the paper's Fig. 5)
        has_posterior = frame["geometry"].str.startswith("posterior_").any()
        style = ":" if has_posterior and not posterior else "-"
        # a second option variant of one model (k=32 vs k=variance) shares its colour: dash-dot
        # and square markers keep the two curves apart
        base = geometry.split(":")[0]
        repeat = variants_drawn.get(base, 0)
        variants_drawn[base] = repeat + 1
        if repeat:
            style = "-."
        ax.plot(
            part[x],
            part["mean"],
            marker="s" if repeat else "o",
            ms=3,
            ls=style,
            color=colour(geometry),
            label=label(geometry),
        )
        ax.fill_between(part[x], part["low"], part["high"], color=colour(geometry), alpha=0.1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel or "number of anchors")
    ax.set_ylabel("AUPRC (mean over findings)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return fig


def runtime_curves(frame: pd.DataFrame, title: str):
    """Seconds vs number of anchors per geometry (log-log), with min-max bars over repeats."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for geometry, part in frame.groupby("geometry", sort=False):
        part = part.sort_values("n_anchors")
        err = np.vstack([part["mean_s"] - part["min_s"], part["max_s"] - part["mean_s"]])
        ax.errorbar(
            part["n_anchors"],
            part["mean_s"],
            yerr=err,
            marker="o",
            ms=4,
            capsize=2,
            color=colour(geometry),
            label=label(geometry),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of anchors N")
    ax.set_ylabel("seconds (fit + features + top-k retrieval)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def temperature_curves(frame: pd.DataFrame, title: str):
    """Mean AUPRC per geometry vs inv_t (left) and vs inv_t x cosine spread (right), with bands;
    the encoder's own inv_t as a solid and the paper's 100 as a dashed vertical line."""
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.2), sharey=True)
    own = frame.attrs.get("encoder_inv_temperatures", [])
    spread = float(frame["spread"].iloc[0])
    for ax, x, xlabel in (
        (axes[0], "inv_temperature", "inverse temperature inv_t"),
        (axes[1], "sharpness", f"inv_t x spread of image-anchor cosines ({spread:.3f})"),
    ):
        for geometry, part in frame.groupby("geometry", sort=False):
            part = part.sort_values(x)
            ax.plot(
                part[x], part["mean"], marker="o", ms=3, color=colour(geometry),
                label=label(geometry),
            )  # fmt: skip
            ax.fill_between(part[x], part["low"], part["high"], color=colour(geometry), alpha=0.1)
        scale = 1.0 if x == "inv_temperature" else spread
        for value in own:
            ax.axvline(value * scale, color="black", lw=0.9)
        ax.axvline(100.0 * scale, color="black", lw=0.9, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("AUPRC (mean over findings)")
    axes[0].legend(fontsize=8, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
