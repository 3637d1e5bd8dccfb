"""Spreads, not draws: the density evaluation's runs summarised as mean and range.

Every figure of the report's summary tables is the mean over all runs (encoders × phantom worlds
× EM seeds) with the smallest and largest run beside it: ``0.739 [0.70, 0.77]``. Per-run bootstrap
intervals stay in the CSV tables (``tables/ood.csv`` …) and in the per-run interval table.

The deployed OOD model is the one of MovMF and Gaussian with the higher mean AUROC on the near
shifts (the hard case: far images are flagged by every model), provided it is ahead in at least
``STABLE_SHARE`` of the runs there and not behind on average on the far groups; otherwise the
report says the evidence does not decide and the default stays.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from chexretrieve.evaluation.density_ood import CONTROL, DISPLAY_ALL, FAR_ALL, NEAR_ALL

#: the models compared for the deployed OOD flag (DensityConfig.OOD_MODELS)
DEPLOYABLE = ("movmf", "gaussian")
#: the winner must be ahead on the near shifts in at least this share of runs
STABLE_SHARE = 0.9
#: the in-distribution control passes when every model's mean AUROC is within this of 0.5 (or
#: within 3 standard errors, when those are wider: small sets)
CONTROL_TOLERANCE = 0.02
RUN_KEYS = ["encoder", "world", "EM seed"]


def spread(values) -> str:
    """``mean [min, max]`` to 3 decimals (one value: just it; none: blank)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return ""
    if len(values) == 1 or np.ptp(values) == 0:
        return f"{values.mean():.3f}"
    return f"{values.mean():.3f} [{values.min():.3f}, {values.max():.3f}]"


def spread_table(frame: pd.DataFrame, index, columns, value: str) -> pd.DataFrame:
    """A pivot whose cells are :func:`spread` of ``value`` over the runs in each cell."""
    cells = frame.groupby([index, columns], sort=False)[value].apply(spread).unstack(columns)
    order_columns = list(dict.fromkeys(frame[columns]))
    order_index = list(dict.fromkeys(frame[index]))
    return cells.reindex(index=order_index, columns=order_columns)


def headline_table(ood: pd.DataFrame) -> pd.DataFrame:
    """AUROC per model (rows) and group family (columns), mean [min, max] over runs."""
    groups = [CONTROL, NEAR_ALL, DISPLAY_ALL, FAR_ALL]
    part = ood[ood["group"].isin(groups)]
    table = spread_table(part, "model", "group", "AUROC")[groups]
    near = ood[ood["group"] == NEAR_ALL]
    table["FPR95, near (all)"] = near.groupby("model", sort=False)["FPR95"].apply(spread)
    table["runs"] = part.groupby("model", sort=False)[RUN_KEYS].apply(
        lambda f: len(f.drop_duplicates())
    )
    return table


def group_table(ood: pd.DataFrame) -> pd.DataFrame:
    """AUROC per group (rows) and model (columns), mean [min, max] over runs."""
    table = spread_table(ood, "group", "model", "AUROC")
    table.insert(0, "n", ood.groupby("group", sort=False)["n"].first())
    table.insert(1, "sources", ood.groupby("group", sort=False)["sources"].first())
    return table


def difference_table(differences: pd.DataFrame) -> pd.DataFrame:
    """MovMF − Gaussian per group: mean [min, max], and in how many runs each is ahead with a
    bootstrap interval excluding 0."""
    rows = []
    for group, part in differences.groupby("group", sort=False):
        runs = len(part)
        rows.append(
            {
                "group": group,
                "MovMF - Gaussian": spread(part["MovMF - Gaussian"]),
                "runs": runs,
                "MovMF ahead (interval > 0)": int((part["lower"] > 0).sum()),
                "Gaussian ahead (interval < 0)": int((part["upper"] < 0).sum()),
                "verdict": _difference_verdict(part),
            }
        )
    return pd.DataFrame(rows).set_index("group")


def _difference_verdict(part: pd.DataFrame) -> str:
    runs = len(part)
    movmf, gaussian = int((part["lower"] > 0).sum()), int((part["upper"] < 0).sum())
    mean = float(part["MovMF - Gaussian"].mean())
    if gaussian >= STABLE_SHARE * runs:
        return "Gaussian better"
    if movmf >= STABLE_SHARE * runs:
        return "MovMF better"
    leader = "Gaussian" if mean < 0 else "MovMF"
    return f"not decided ({leader} ahead on average)"


def per_run_intervals(ood: pd.DataFrame, groups=(NEAR_ALL, FAR_ALL)) -> pd.DataFrame:
    """AUROC with its bootstrap interval per (encoder, world) at the first EM seed."""
    first = ood["EM seed"] == ood["EM seed"].min()
    part = ood[first & ood["group"].isin(groups) & ood["model"].isin(DEPLOYABLE)].copy()
    part["AUROC [95 % interval]"] = [
        f"{a:.3f} [{lo:.3f}, {hi:.3f}]"
        for a, lo, hi in zip(part["AUROC"], part["lower"], part["upper"], strict=True)
    ]
    return part.pivot_table(
        index=["encoder", "world"],
        columns=["group", "model"],
        values="AUROC [95 % interval]",
        aggfunc="first",
    )


def flag_table(flags: pd.DataFrame) -> pd.DataFrame:
    """The deployed rule per model and percentile: shares flagged, mean [min, max] over runs;
    the real chest film RG1: in how many runs it is flagged."""
    columns = [c for c in flags.columns if c.endswith("flagged") and c != "RG1 flagged"]
    rows = []
    for (model, percentile), part in flags.groupby(["model", "percentile"], sort=False):
        row = {"model": model, "percentile": percentile}
        row.update({c: spread(part[c]) for c in columns})
        if "RG1 flagged" in part:
            row["RG1 flagged (runs)"] = f"{int((part['RG1 flagged'] > 0.5).sum())} / {len(part)}"
        rows.append(row)
    return pd.DataFrame(rows).set_index(["model", "percentile"])


def choose_ood_model(ood: pd.DataFrame, differences: pd.DataFrame) -> dict:
    """The deployed OOD model the evidence supports (module text), with its numbers."""
    near = ood[ood["group"] == NEAR_ALL].pivot_table(
        index=RUN_KEYS, columns="model", values="AUROC"
    )
    far = ood[ood["group"] == FAR_ALL].groupby("model")["AUROC"].mean()
    gain = near["gaussian"] - near["movmf"]
    share_gaussian = float((gain > 0).mean())
    out = {
        "near AUROC mean": {m: float(near[m].mean()) for m in DEPLOYABLE},
        "far AUROC mean": {m: float(far[m]) for m in DEPLOYABLE},
        "runs": int(len(near)),
        "share of runs Gaussian ahead on near shifts": share_gaussian,
    }
    if share_gaussian >= STABLE_SHARE and far["gaussian"] >= far["movmf"]:
        out["model"], out["decided"] = "gaussian", True
    elif 1 - share_gaussian >= STABLE_SHARE and far["movmf"] >= far["gaussian"]:
        out["model"], out["decided"] = "movmf", True
    else:
        out["model"], out["decided"] = None, False
    return out


def control_check(ood: pd.DataFrame) -> dict:
    """The in-distribution control passes when every model's mean AUROC over the runs is within
    max(``CONTROL_TOLERANCE``, 3 standard errors) of 0.5. The standard error comes from the runs'
    bootstrap intervals (half-width / 1.96), divided by √(number of worlds): runs of one world
    share their images, so only worlds are independent draws."""
    part = ood[ood["group"] == CONTROL]
    worlds = max(1, part["world"].nunique()) if "world" in part else 1
    means = part.groupby("model")["AUROC"].mean()
    error = ((part["upper"] - part["lower"]) / (2 * 1.96)).groupby(part["model"]).mean()
    allowed = np.maximum(CONTROL_TOLERANCE, 3 * error / np.sqrt(worlds))
    covered = ((part["lower"] <= 0.5) & (part["upper"] >= 0.5)).mean()
    passed = bool((np.abs(means - 0.5) <= allowed.reindex(means.index)).all())
    return {
        "mean AUROC": {m: float(v) for m, v in means.items()},
        "allowed distance from 0.5": {m: float(v) for m, v in allowed.items()},
        "share of run intervals covering 0.5": float(covered),
        "check": "passed" if passed else "FAILED",
    }


def mean_table(frame: pd.DataFrame, index, value_columns) -> pd.DataFrame:
    """Per ``index`` group, :func:`spread` of each value column over the runs."""
    return frame.groupby(index, sort=False)[list(value_columns)].agg(spread)
