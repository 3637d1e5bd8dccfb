"""The long tail: do rare finding *combinations* get low density, abnormality held equal?

A held-out phantom is *rare* when its true finding combination occurs in at most ``rare_max``
archive images. Rare combinations are mostly multi-finding abnormal films and common ones mostly
normal, so "rare vs the five most common combinations" measures abnormality, not rarity (a single
vMF scores best on it). The matched test compares a rare image only with images of the *same
abnormality*: the same number of true pathologies (Support Devices not counted), whose
combination is not rare. The matched AUROC is the share of such (rare, not rare) pairs, within
each stratum, where the rare image has the lower typicality (ties half): the Mann–Whitney
statistic over within-stratum pairs only. Its interval resamples held-out images.

The unmatched comparison (rare vs the five most common combinations) is kept beside it, so the
report shows how much of the old figure was abnormality.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from chexretrieve.evaluation.density_metrics import (
    N_BOOTSTRAP,
    auroc,
    percentile_interval,
    weighted_auroc,
)
from chexretrieve.findings import FINDINGS

PATHOLOGIES = tuple(f for f in FINDINGS if f != "Support Devices")


def combinations(truth: pd.DataFrame) -> list[frozenset]:
    values = truth[list(FINDINGS)].to_numpy() > 0.5
    return [frozenset(np.asarray(FINDINGS)[row]) for row in values]


def tail_groups(archive_truth, heldout_truth, rare_max: int):
    """(rare mask, common-5 mask, abnormality = number of true pathologies) of the held-out."""
    counts = Counter(combinations(archive_truth))
    common = {c for c, _ in counts.most_common(5)}
    held = combinations(heldout_truth)
    rare = np.array([counts.get(c, 0) <= rare_max for c in held])
    usual = np.array([c in common for c in held])
    abnormality = np.array([len(c & set(PATHOLOGIES)) for c in held])
    return rare, usual, abnormality


def matched_auroc(scores, rare, strata, weights=None) -> np.ndarray:
    """P(rare image less typical than a not-rare one of the same stratum), per weight row."""
    low = -np.asarray(scores, dtype=np.float64)  # low typicality = positive
    weights = np.ones((1, len(low))) if weights is None else np.atleast_2d(weights)
    total = np.zeros(weights.shape[0])
    pairs = np.zeros(weights.shape[0])
    for stratum in np.unique(strata):
        inside = strata == stratum
        pos, neg = inside & rare, inside & ~rare
        if not pos.any() or not neg.any():
            continue
        w_pos, w_neg = weights[:, pos], weights[:, neg]
        count = w_pos.sum(axis=1) * w_neg.sum(axis=1)
        value = weighted_auroc(low[pos], low[neg], w_pos, w_neg)
        total += np.nan_to_num(value) * count
        pairs += count
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, total / pairs, np.nan)


def long_tail_rows(world, models, rare_max: int, seed: int) -> list[dict]:
    """Per model: the matched AUROC with its interval, and the unmatched one."""
    rare, usual, abnormality = tail_groups(world.archive_truth, world.heldout_truth, rare_max)
    in_strata = np.zeros(len(rare), dtype=bool)
    for stratum in np.unique(abnormality):
        inside = abnormality == stratum
        if (inside & rare).any() and (inside & ~rare).any():
            in_strata |= inside
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(rare), size=(N_BOOTSTRAP, len(rare)))
    weights = np.zeros((N_BOOTSTRAP, len(rare)))
    np.add.at(weights, (np.arange(N_BOOTSTRAP)[:, None], draws), 1.0)
    scored = {name: score(world.heldout) for name, score in models.scores.items()}
    boot = {name: matched_auroc(v, rare, abnormality, weights) for name, v in scored.items()}
    rows = []
    for name, values in scored.items():
        lower, upper = percentile_interval(boot[name])
        row = {
            "model": name,
            "n rare (matched strata)": int((rare & in_strata).sum()),
            "n not rare (matched strata)": int((~rare & in_strata).sum()),
            "matched AUROC": float(matched_auroc(values, rare, abnormality)[0]),
            "lower": lower,
            "upper": upper,
            "unmatched AUROC (rare vs 5 most common)": auroc(-values[rare], -values[usual]),
        }
        if name == "movmf":  # the paired difference to the Gaussian, same resamplings
            gap = float(
                matched_auroc(values, rare, abnormality)[0]
                - matched_auroc(scored["gaussian"], rare, abnormality)[0]
            )
            low, high = percentile_interval(boot["movmf"] - boot["gaussian"])
            row.update({"MovMF - Gaussian": gap, "MovMF - Gaussian lower": low,
                        "MovMF - Gaussian upper": high})  # fmt: skip
        rows.append(row)
    return rows
