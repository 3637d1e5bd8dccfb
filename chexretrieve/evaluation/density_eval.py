"""`chexretrieve eval density`: does the vMF mixture detect OOD queries, rare cases and concepts?

The seed (``seeds/movmf-clip-abstract.txt``) claims, for CLIP embeddings: (1) a MovMF density
detects out-of-distribution inputs better than a Gaussian one, (2) it detects long-tailed (rare)
inputs better, (3) its components are a sparse, interpretable decomposition. This module measures
each on the phantom world (:mod:`chexretrieve.evaluation.density_data`), with the same archive and
held-out phantoms for every model:

* models, all fitted on the archive only: ``movmf`` (K by held-out likelihood among the
  candidates, :func:`select_movmf_density`), ``movmf K=1`` (one vMF: the mixture's ablation),
  ``gaussian`` (Ledoit–Wolf shrinkage Gaussian, the seed's Gaussian assumption), ``knn`` (mean
  cosine to the 10 nearest archive images);
* OOD: AUROC (OOD = positive class, score = minus the model's typicality) and FPR95 (share of
  held-out phantoms flagged at the threshold that catches 95 % of the OOD images), over all OOD
  images and per group; plus the deployed rule (flag below the 0.5th percentile of held-out-archive
  scores): the share of held-out phantoms and of each OOD group flagged;
* long tail: held-out phantoms whose true finding combination occurs in at most ``rare_max``
  archive images vs those with one of the five most common combinations; AUROC of "rare" by low
  typicality, and the median typicality percentile of each;
* decomposition: how many components hold 90 % of an image's posterior (sparsity), and how well
  the top component predicts each finding (purity: Σ_k N_k/N · max(rate, 1 − rate), averaged over
  findings, next to the base rate's max(p, 1 − p)), with the normalised mutual information between
  top component and finding combination; the same for spherical k-means with the same K and for a
  random assignment of the same sizes (chance).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from chexretrieve.evaluation.density_data import DensitySets
from chexretrieve.findings import FINDINGS
from chexretrieve.geometry.density_baselines import GaussianDensity, KnnCosineScore
from chexretrieve.geometry.movmf_density import (
    fit_movmf_density,
    select_movmf_density,
    spherical_kmeans_labels,
)

#: OOD flag rule of the deployed density (DensityConfig.ood_percentile)
FLAG_PERCENTILE = 0.5


def auroc(positive_scores, negative_scores) -> float:
    """P(score of a positive > score of a negative), ties counted half (Mann–Whitney)."""
    pos = np.asarray(positive_scores, dtype=np.float64)
    neg = np.asarray(negative_scores, dtype=np.float64)
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    order = np.concatenate([pos, neg])
    ranks = pd.Series(order).rank(method="average").to_numpy()
    u = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def fpr_at_95_tpr(positive_scores, negative_scores) -> float:
    """Share of negatives scoring at or above the threshold that keeps 95 % of the positives."""
    pos = np.sort(np.asarray(positive_scores, dtype=np.float64))
    if len(pos) == 0:
        return float("nan")
    threshold = pos[int(np.floor(0.05 * len(pos)))]  # at least 95 % of positives are >= it
    return float(np.mean(np.asarray(negative_scores) >= threshold))


@dataclass
class FittedModels:
    scores: dict[str, callable]  # name -> typicality(rows) (higher = more typical)
    reference: dict[str, np.ndarray]  # name -> typicality of held-out-of-archive images
    movmf: object
    selection: object
    fit_seconds: dict[str, float]


def fit_models(archive: np.ndarray, candidates, seed: int) -> FittedModels:
    timings = {}
    started = time.perf_counter()
    selection = select_movmf_density(archive, candidates=candidates, seed=seed)
    timings["movmf"] = time.perf_counter() - started
    movmf = selection.density
    started = time.perf_counter()
    single = fit_movmf_density(archive, 1, seed=seed)
    timings["movmf K=1"] = time.perf_counter() - started
    started = time.perf_counter()
    gaussian = GaussianDensity.fit(archive)
    timings["gaussian"] = time.perf_counter() - started
    started = time.perf_counter()
    knn = KnnCosineScore(archive, k=10)
    timings["knn"] = time.perf_counter() - started
    scores = {
        "movmf": movmf.log_density,
        "movmf K=1": single.log_density,
        "gaussian": gaussian.log_density,
        "knn": knn.score,
    }
    # the deployed rule's reference: archive images scored by a model that did not see them
    held, train = (
        selection.heldout_rows,
        np.setdiff1d(np.arange(len(archive)), selection.heldout_rows),
    )
    part = archive[train]
    reference = {
        "movmf": selection.heldout_log_density,
        "movmf K=1": fit_movmf_density(part, 1, seed=seed).log_density(archive[held]),
        "gaussian": GaussianDensity.fit(part).log_density(archive[held]),
        "knn": KnnCosineScore(part, k=10).score(archive[held]),
    }
    return FittedModels(scores, reference, movmf, selection, timings)


def ood_tables(sets: DensitySets, models: FittedModels):
    """(AUROC / FPR95 per model and OOD group, flag rates of the deployed rule per group, and per
    kind of phantom render and synthetic image)."""
    rows, flags, kinds = [], [], []
    groups = ["all OOD", *sorted(set(sets.ood_group))]
    for name, score in models.scores.items():
        inside = -score(sets.heldout)
        outside = -score(sets.ood)
        chest = -score(sets.chest) if len(sets.chest) else np.zeros(0)
        threshold = -np.percentile(models.reference[name], FLAG_PERCENTILE)
        for group in groups:
            chosen = outside if group == "all OOD" else outside[sets.ood_group == group]
            rows.append(
                {
                    "model": name,
                    "OOD group": group,
                    "n OOD": len(chosen),
                    "AUROC": auroc(chosen, inside),
                    "FPR95": fpr_at_95_tpr(chosen, inside),
                }
            )
        flag = {"model": name, "held-out phantoms flagged": float(np.mean(inside > threshold))}
        for kind in sorted(set(sets.ood_name[sets.ood_group != "pydicom-data"])):
            picked = outside[(sets.ood_name == kind) & (sets.ood_group != "pydicom-data")]
            kinds.append({"model": name, "kind": kind, "n": len(picked),
                          "flagged": float(np.mean(picked > threshold))})  # fmt: skip
        for group in groups[1:]:
            flag[f"{group} flagged"] = float(np.mean(outside[sets.ood_group == group] > threshold))
        if len(chest):
            flag["real chest films (RG1) flagged"] = float(np.mean(chest > threshold))
        flags.append(flag)
    by_kind = pd.DataFrame(kinds).pivot(index="kind", columns="model", values="flagged")
    by_kind.insert(0, "n", pd.DataFrame(kinds).groupby("kind")["n"].first())
    return (
        pd.DataFrame(rows),
        pd.DataFrame(flags).set_index("model"),
        by_kind[["n", *models.scores]],
    )


def per_file_table(sets: DensitySets, models: FittedModels) -> pd.DataFrame:
    """Each pydicom-data file (and the RG1 chest films): its percentile among held-out phantoms."""
    rows = []
    names = list(sets.ood_name[sets.ood_group == "pydicom-data"]) + list(sets.chest_name)
    picked = np.vstack([sets.ood[sets.ood_group == "pydicom-data"], sets.chest])
    for name, score in models.scores.items():
        inside = np.sort(score(sets.heldout))
        values = score(picked)
        percent = 100 * np.searchsorted(inside, values, side="right") / len(inside)
        for file, value in zip(names, percent, strict=True):
            rows.append({"file": file, "model": name, "percentile among held-out": value})
    table = pd.DataFrame(rows).pivot(
        index="file", columns="model", values="percentile among held-out"
    )
    return table[list(models.scores)]


def combinations(truth: pd.DataFrame) -> list[frozenset]:
    values = truth[list(FINDINGS)].to_numpy() > 0.5
    return [frozenset(np.asarray(FINDINGS)[row]) for row in values]


def long_tail_table(sets: DensitySets, models: FittedModels, rare_max: int) -> pd.DataFrame:
    counts = Counter(combinations(sets.archive_truth))
    common = {c for c, _ in counts.most_common(5)}
    held = combinations(sets.heldout_truth)
    rare = np.array([counts.get(c, 0) <= rare_max for c in held])
    usual = np.array([c in common for c in held])
    rows = []
    for name, score in models.scores.items():
        values = score(sets.heldout)
        reference = np.sort(models.reference[name])
        percent = 100 * np.searchsorted(reference, values, side="right") / len(reference)
        rows.append(
            {
                "model": name,
                "n rare": int(rare.sum()),
                "n common": int(usual.sum()),
                "AUROC rare vs common (low density)": auroc(-values[rare], -values[usual]),
                "median percentile, rare": float(np.median(percent[rare]))
                if rare.any()
                else np.nan,
                "median percentile, common": float(np.median(percent[usual])),
            }
        )
    return pd.DataFrame(rows).set_index("model")


def _purity(assignment: np.ndarray, truth: pd.DataFrame) -> tuple[float, float]:
    values = truth[list(FINDINGS)].to_numpy() > 0.5
    total, base = 0.0, 0.0
    for j in range(values.shape[1]):
        p = values[:, j].mean()
        base += max(p, 1 - p)
        pure = 0.0
        for k in np.unique(assignment):
            members = values[assignment == k, j]
            rate = members.mean()
            pure += len(members) / len(values) * max(rate, 1 - rate)
        total += pure
    return total / values.shape[1], base / values.shape[1]


def decomposition_table(sets: DensitySets, models: FittedModels, seed: int) -> pd.DataFrame:
    from sklearn.metrics import normalized_mutual_info_score

    movmf = models.movmf
    posterior = movmf.posterior(sets.heldout)
    ordered = -np.sort(-posterior, axis=1)
    needed = (np.cumsum(ordered, axis=1) < 0.9 - 1e-12).sum(axis=1) + 1
    combos = [",".join(sorted(c)) or "none" for c in combinations(sets.heldout_truth)]
    k = movmf.n_components
    assignments = {"movmf top component": posterior.argmax(axis=1)}
    both = np.vstack([sets.archive, sets.heldout])
    labels = spherical_kmeans_labels(both, k, seed)
    assignments[f"spherical k-means (K={k})"] = labels[len(sets.archive) :]
    rng = np.random.default_rng(seed)
    assignments["random, same sizes (chance)"] = rng.permutation(assignments["movmf top component"])
    rows = []
    for name, assignment in assignments.items():
        purity, base = _purity(assignment, sets.heldout_truth)
        rows.append(
            {
                "assignment": name,
                "K": k,
                "finding purity": purity,
                "base rate purity": base,
                "NMI with finding combination": normalized_mutual_info_score(combos, assignment),
                "mean components for 90 % posterior": float(needed.mean())
                if name.startswith("movmf")
                else np.nan,
            }
        )
    return pd.DataFrame(rows).set_index("assignment")


def finding_anchor_texts(encoder):
    """Every finding's latest anchor set embedded by ``encoder`` (AnchorText), for naming."""
    from chexretrieve.anchors import latest_anchor_set
    from chexretrieve.density.archive import AnchorText

    texts = []
    for finding in FINDINGS:
        try:
            anchor_set = latest_anchor_set(finding)
        except (ValueError, OSError):
            continue
        sentences = tuple(anchor_set.sentences)
        vectors = np.asarray(encoder.embed_texts(list(sentences)), dtype=np.float64)
        texts.append(AnchorText(finding, sentences, vectors))
    return texts


def component_names_table(sets: DensitySets, models: FittedModels, anchors, top: int = 16):
    """The ``top`` heaviest components: weight, dominant true findings in the archive, the
    nearest anchor sentence, and the share of held-out phantoms whose top component it is."""
    from chexretrieve.density.archive import name_components

    movmf = models.movmf
    ids = np.arange(len(sets.archive))
    truth = sets.archive_truth.set_index(pd.Index(ids))
    names = name_components(movmf, movmf.posterior(sets.archive), ids, truth, anchors)
    held_top = np.bincount(movmf.posterior(sets.heldout).argmax(axis=1), minlength=len(names))
    rows = []
    for name in sorted(names, key=lambda n: -n.weight)[:top]:
        rows.append(
            {
                "component": name.component,
                "weight": name.weight,
                "dominant true findings": ", ".join(name.labels) or "none (normal or mixed)",
                "nearest anchor sentence": name.sentences[0] if name.sentences else "",
                "held-out share": held_top[name.component] / len(sets.heldout),
            }
        )
    return pd.DataFrame(rows).set_index("component")
