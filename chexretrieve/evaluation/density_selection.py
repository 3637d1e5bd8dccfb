"""The mixture's component count K, chosen over a range the held-out likelihood shows is wide.

:func:`select_k` fits the vMF mixture for each candidate K on 80 % of the archive and scores the
other 20 % (the split of :func:`chexretrieve.geometry.movmf_density.select_movmf_density`, same
seed). While the best K is one of the two largest candidates tried, the range is extended (64 →
96 → 128 → 192 → 256 → 384 → 512 …, ×1.5 then ×4/3) up to half the training split's size, so the
curve is seen to *turn* (two larger candidates score lower), to *flatten* (the best is the
largest, but gained under ``FLAT_NATS`` on the one before), or the report says it was still rising
at the cap. The curve, the chosen K and which of the three it was are reported.

:func:`tempered_heldout` scores the same held-out split under the chosen fit with every κ divided
by a temperature T (T > 1 flattens each component, so responsibilities become graded; the result
is still a proper vMF mixture), for the temperature a graded decomposition would need.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chexretrieve.geometry.movmf_density import MovMFDensity, fit_movmf_density

#: share of the archive held out to score each K (as select_movmf_density)
HELDOUT_FRACTION = 0.2
#: a best K at the top of the range that gained less than this (nats per image) is "flattened"
FLAT_NATS = 0.1
#: temperatures tried for the tempered responsibilities (κ / T)
TEMPERATURES = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)


@dataclass(frozen=True)
class KSelection:
    curve: dict[int, float]  # K -> mean held-out log-likelihood (nats per image)
    chosen: int
    shape: str  # "turned", "flattened" or "still rising at the cap"
    train_rows: np.ndarray
    heldout_rows: np.ndarray
    train_fit: MovMFDensity  # the chosen K fitted on the training rows


def split_rows(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) row indices of the 80/20 split (select_movmf_density's rule)."""
    held_count = int(round(count * HELDOUT_FRACTION))
    order = np.random.default_rng(seed).permutation(count)
    return np.sort(order[held_count:]), np.sort(order[:held_count])


def _next_candidate(largest: int) -> int:
    if largest < 4:
        return largest * 2
    is_power = largest & (largest - 1) == 0
    return largest * 3 // 2 if is_power else largest * 4 // 3


def select_k(x, candidates, seed: int = 0, max_k: int | None = None) -> KSelection:
    """Held-out likelihood per K, the range extended until the curve turns or flattens."""
    x = np.asarray(x, dtype=np.float64)
    train, held = split_rows(len(x), seed)
    cap = max_k or max(1, len(train) // 2)
    tried = sorted({int(k) for k in candidates if 1 <= int(k) <= cap}) or [1]
    curve: dict[int, float] = {}
    fits: dict[int, MovMFDensity] = {}

    def score(k: int) -> None:
        fits[k] = fit_movmf_density(x[train], k, seed=seed)
        curve[k] = float(fits[k].log_density(x[held]).mean())

    for k in tried:
        score(k)
    while True:
        ordered = sorted(curve)
        best = max(curve, key=curve.get)
        if best not in ordered[-2:]:
            break  # two larger candidates scored lower: the curve turned
        following = _next_candidate(ordered[-1])
        if following > cap:
            break
        score(following)
    ordered = sorted(curve)
    best = max(curve, key=curve.get)
    if best != ordered[-1]:
        shape = "turned"
    elif len(ordered) > 1 and curve[best] - curve[ordered[-2]] < FLAT_NATS:
        shape = "flattened"
    else:
        shape = "still rising at the cap"
    return KSelection(curve, best, shape, train, held, fits[best])


def tempered(model: MovMFDensity, temperature: float) -> MovMFDensity:
    """The same mixture with every concentration divided by ``temperature``."""
    return MovMFDensity(model.weights, model.directions, model.concentrations / temperature)


def tempered_heldout(model: MovMFDensity, heldout, temperatures=TEMPERATURES) -> dict[float, float]:
    """T -> mean held-out log-likelihood of the mixture with κ / T."""
    rows = np.asarray(heldout, dtype=np.float64)
    return {float(t): float(tempered(model, t).log_density(rows).mean()) for t in temperatures}
