"""Per-finding verdicts with multiplicity control: Holm's step-down adjustment over the findings.

A report compares each geometry with a reference on every finding (13 tests per comparison). Read
one by one, some of those per-finding "wins" are expected by chance; Holm (1979) controls the
family-wise error rate over the findings of one comparison at ``alpha`` without assuming
independence. The p-values are the bootstrap p-values of the per-finding intervals
(``intervals.bootstrap_p``); the Average row is the comparison's one headline figure and is not
adjusted. Per-finding verdicts are exploratory: the report labels them so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: family-wise error rate of the per-finding verdicts
ALPHA = 0.05
#: the row that is not part of a family (the equal-weight average over findings)
AVERAGE = "Average"


def holm_adjust(p_values) -> np.ndarray:
    """Holm's adjusted p-values, in the input's order; NaN entries stay NaN and do not count.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted p_(i) = max over j <= i of
    min(1, (m - j + 1) p_(j)). Rejecting where the adjusted value is <= alpha is Holm's step-down
    procedure at level alpha."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    present = np.flatnonzero(~np.isnan(p))
    if present.size == 0:
        return out
    if (p[present] < 0).any() or (p[present] > 1).any():
        raise ValueError("p-values must lie in [0, 1]")
    m = present.size
    order = present[np.argsort(p[present], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def verdict(mean: float, p_adjusted: float, alpha: float = ALPHA) -> str:
    """ "holds" (adjusted p <= alpha, geometry better), "reversed" (adjusted p <= alpha, reference
    better), "not shown" otherwise, or "n/a" without a p-value."""
    if np.isnan(p_adjusted):
        return "n/a"
    if p_adjusted <= alpha:
        return "holds" if mean > 0 else "reversed"
    return "not shown"


def add_holm(differences: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """``differences`` with ``p_holm`` and ``verdict`` columns: Holm over the findings of each
    (geometry, reference) comparison; the Average rows get neither (NaN, "")."""
    out = differences.copy()
    out["p_holm"] = np.nan
    out["verdict"] = ""
    if out.empty or "p_value" not in out.columns:
        return out
    findings = out["finding"] != AVERAGE
    for _, rows in out[findings].groupby(["geometry", "reference"], sort=False):
        adjusted = holm_adjust(rows["p_value"].to_numpy(dtype=float))
        out.loc[rows.index, "p_holm"] = adjusted
        out.loc[rows.index, "verdict"] = [
            verdict(m, p, alpha) for m, p in zip(rows["mean"], adjusted, strict=True)
        ]
    return out


def verdict_counts(differences: pd.DataFrame) -> pd.DataFrame:
    """Per comparison: findings whose interval excludes 0 in the geometry's favour (unadjusted)
    and findings that hold after Holm, beside the findings tested."""
    rows = []
    per_finding = differences[differences["finding"] != AVERAGE]
    for (geometry, reference), part in per_finding.groupby(["geometry", "reference"], sort=False):
        rows.append(
            {
                "geometry": geometry,
                "reference": reference,
                "findings": int(len(part)),
                "interval above 0 (unadjusted)": int((part["low"] > 0).sum()),
                "holds after Holm": int((part["verdict"] == "holds").sum()),
                "interval below 0 (unadjusted)": int((part["high"] < 0).sum()),
                "reversed after Holm": int((part["verdict"] == "reversed").sum()),
            }
        )
    return pd.DataFrame(rows)
