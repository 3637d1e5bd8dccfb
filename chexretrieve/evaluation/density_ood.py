"""OOD detection per group: AUROC with a bootstrap interval, FPR95, MovMF − Gaussian, flag rates.

Negatives are always the world's held-out phantoms; each group's images are the positives, scored
by low typicality. Groups (:mod:`chexretrieve.evaluation.density_data`):

* ``in-distribution control``: more phantoms of the same world. Nothing tells them apart from the
  held-out ones, so every model must give about 0.5: the check that the comparison can fail;
* ``near: <shift>`` for each acquisition / rendering change and ``near (all)``;
* ``display: <error>`` for each display error and ``display (all)``;
* ``far: other body parts``, ``far: photographs``, ``far: synthetic`` and ``far (all)``.

Intervals resample the positives by source (a phantom's shifted renders, a file's encodings move
together) and the held-out phantoms by image. The deployed rule (flag below a low percentile of
the ``reference`` scores, :mod:`chexretrieve.evaluation.density_models`) is measured at several
percentiles: the share flagged of each group, of the held-out phantoms (its false alarms) and
whether the real chest film RG1 is flagged.
"""

from __future__ import annotations

import numpy as np

from chexretrieve.evaluation.density_data import (
    CHEST_FILM,
    FAR_BODY_PARTS,
    FAR_PHOTOGRAPHS,
    FAR_SYNTHETIC,
)
from chexretrieve.evaluation.density_metrics import (
    bootstrap_auroc,
    bootstrap_difference,
    fpr_at_95_tpr,
)

CONTROL = "in-distribution control"
NEAR_ALL, DISPLAY_ALL, FAR_ALL = "near (all)", "display (all)", "far (all)"
#: percentiles of the deployed rule measured (DensityConfig.ood_percentile is one of them)
FLAG_PERCENTILES = (0.5, 1.0, 2.0, 5.0)


def ood_groups(world, external) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(group, rows, cluster of each row) in report order."""
    groups = [(CONTROL, world.control, np.arange(len(world.control)))]
    for family, pooled in (("near", NEAR_ALL), ("display", DISPLAY_ALL)):
        chosen = world.shifted_group == family
        kinds = list(dict.fromkeys(world.shifted_kind[chosen]))
        for kind in kinds:
            picked = chosen & (world.shifted_kind == kind)
            groups.append(
                (f"{family}: {kind}", world.shifted[picked], world.shifted_source[picked])
            )
        groups.append((pooled, world.shifted[chosen], world.shifted_source[chosen]))
    far = np.isin(external.group, (FAR_BODY_PARTS, FAR_PHOTOGRAPHS, FAR_SYNTHETIC))
    for name in (FAR_BODY_PARTS, FAR_PHOTOGRAPHS, FAR_SYNTHETIC):
        picked = external.group == name
        groups.append((name, external.rows[picked], external.source[picked]))
    groups.append((FAR_ALL, external.rows[far], external.source[far]))
    return groups


def ood_rows(world, external, models, seed: int) -> tuple[list[dict], list[dict]]:
    """(per model and group: AUROC, interval, FPR95; per group: MovMF − Gaussian, interval)."""
    rows, differences = [], []
    inside = {name: -score(world.heldout) for name, score in models.scores.items()}
    for group, images, clusters in ood_groups(world, external):
        if len(images) == 0:
            continue
        outside = {name: -score(images) for name, score in models.scores.items()}
        for name in models.scores:
            value, lower, upper = bootstrap_auroc(outside[name], inside[name], clusters, seed=seed)
            rows.append(
                {
                    "model": name,
                    "group": group,
                    "n": len(images),
                    "sources": len(np.unique(clusters)),
                    "AUROC": value,
                    "lower": lower,
                    "upper": upper,
                    "FPR95": fpr_at_95_tpr(outside[name], inside[name]),
                }
            )
        gain, lower, upper = bootstrap_difference(
            outside["movmf"], inside["movmf"], outside["gaussian"], inside["gaussian"],
            clusters, seed=seed,
        )  # fmt: skip
        differences.append(
            {"group": group, "MovMF - Gaussian": gain, "lower": lower, "upper": upper}
        )
    return rows, differences


def flag_rows(world, external, models) -> list[dict]:
    """Per model and percentile p: the share of each group flagged below the p-th percentile
    of the reference scores."""
    groups = {g: images for g, images, _ in ood_groups(world, external)}
    chest = external.rows[external.group == CHEST_FILM]
    rows = []
    for name, score in models.scores.items():
        held = score(world.heldout)
        scored = {g: score(images) for g, images in groups.items() if len(images)}
        chest_scores = score(chest) if len(chest) else np.zeros(0)
        for percentile in FLAG_PERCENTILES:
            threshold = np.percentile(models.reference[name], percentile)
            row = {
                "model": name,
                "percentile": percentile,
                "held-out flagged": float(np.mean(held < threshold)),
            }
            for group in (CONTROL, NEAR_ALL, DISPLAY_ALL, FAR_ALL):
                if group in scored:
                    row[f"{group} flagged"] = float(np.mean(scored[group] < threshold))
            if len(chest_scores):
                row["RG1 flagged"] = float(np.mean(chest_scores < threshold))
            rows.append(row)
    return rows
