"""Is the mixture's posterior a decomposition into concepts, or a hard assignment?

Measured on the held-out phantoms, beside a *structureless control*: a Gaussian cloud with the
archive's mean and covariance (in R^d, projected onto the sphere), which has no concepts at all,
fitted with the same K and seed and scored on its own held-out draw:

* mean responsibility entropy H (nats; at most log K), the effective number of components
  exp(H) per image (averaged), the components covering 90 % of the posterior, and the share of
  images with more than 0.99 on one component. If the archive and the control give the same, a
  sparse posterior is a property of the fit (concentrated components in high dimension), not
  evidence of concepts.
* tempered responsibilities: every κ divided by a temperature T chosen on the archive's held-out
  likelihood (:func:`chexretrieve.evaluation.density_selection.tempered_heldout`); the same
  statistics at that T. A T near 1 means the likelihood itself wants the hard assignment.
* purity and NMI of the top component against the finding combination, next to spherical
  k-means with the same K and a random assignment of the same sizes (is the mixture more than a
  hard clustering?).
* naming: each component's dominant true labels (responsibility-weighted rate ≥ 0.5 and
  ≥ 1.5 × the archive's rate, or halfway from it to 1 when that is lower: a label most images
  carry), "No Finding" included (no pathology; devices allowed, as CheXpert), and its nearest
  positive and nearest negative anchor sentence (both sides centred on
  their own mean, as the serving code names components). The anchor name *agrees* when the
  nearest sentence is positive for a dominant finding, or negative for a component whose
  dominant labels include No Finding; the agreement rate is shown beside chance (sentences of
  other components, averaged over permutations).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.evaluation.density_metrics import components_for_mass, entropy_rows
from chexretrieve.evaluation.density_selection import TEMPERATURES, tempered, tempered_heldout
from chexretrieve.findings import FINDINGS
from chexretrieve.geometry.movmf_density import fit_movmf_density, spherical_kmeans_labels

#: "No Finding": no pathology positive (Support Devices allowed, as CheXpert's label)
NO_FINDING = "No Finding"
PATHOLOGIES = tuple(f for f in FINDINGS if f != "Support Devices")
#: a label dominates a component at this weighted rate and this lift over the archive's rate
LABEL_RATE, LABEL_LIFT = 0.5, 1.5
#: permutations of the chance agreement
CHANCE_PERMUTATIONS = 200


@dataclass(frozen=True)
class PolarAnchors:
    """Every finding's anchor sentences with their polarity and (N, d) embeddings."""

    findings: tuple[str, ...]  # per sentence
    polarity: tuple[str, ...]  # "positive" / "negative" per sentence
    sentences: tuple[str, ...]
    embeddings: np.ndarray


def polar_anchors(encoder, cache_dir=None) -> tuple[PolarAnchors, dict[str, str]]:
    """The latest anchor set of every finding, embedded (cached, keyed on the sentences and the
    encoder's text fingerprint), and {finding: content hash}."""
    from chexretrieve.anchors import latest_anchor_set
    from chexretrieve.cache import cache_folder
    from chexretrieve.evaluation.sources import EmbeddingCache, embed_texts_cached

    findings, polarity, sentences, hashes = [], [], [], {}
    for finding in FINDINGS:
        try:
            anchor_set = latest_anchor_set(finding)
        except (ValueError, OSError):
            continue
        hashes[finding] = anchor_set.content_hash
        for entry in anchor_set.entries:
            findings.append(finding)
            polarity.append(entry.polarity)
            sentences.append(entry.text)
    vectors = None
    if sentences:
        cache = EmbeddingCache(Path(cache_dir or cache_folder("eval")))
        vectors = np.asarray(embed_texts_cached(encoder, sentences, cache), dtype=np.float64)
    return PolarAnchors(tuple(findings), tuple(polarity), tuple(sentences), vectors), hashes


def structureless_cloud(archive, count: int, seed: int) -> np.ndarray:
    """``count`` unit rows from N(mean, covariance) of the archive, projected onto the sphere."""
    x = np.asarray(archive, dtype=np.float64)
    rng = np.random.default_rng([seed, 11])
    rows = rng.multivariate_normal(x.mean(axis=0), np.cov(x, rowvar=False), size=count)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def part_rows(rows):
    """The first 80 % of the control's archive rows (its fit for the temperature)."""
    return rows[: int(round(0.8 * len(rows)))]


def structureless_control(archive, heldout_count: int, k: int, seed: int):
    """(mixture fitted on the cloud's archive, the same K on its first 80 %, the cloud's archive
    rows, its held-out rows): the cloud drawn by :func:`structureless_cloud`."""
    count = len(archive)
    cloud = structureless_cloud(archive, count + heldout_count, seed)
    train, test = cloud[:count], cloud[count:]
    fitted = fit_movmf_density(train, k, seed=seed)
    part = fit_movmf_density(part_rows(train), k, seed=seed)
    return fitted, part, train, test


def posterior_stats(posterior) -> dict[str, float]:
    entropy = entropy_rows(posterior)
    return {
        "mean entropy (nats)": float(entropy.mean()),
        "effective components exp(H)": float(np.exp(entropy).mean()),
        "components for 90 %": float(components_for_mass(posterior, 0.9).mean()),
        "share with top > 0.99": float((np.asarray(posterior).max(axis=1) > 0.99).mean()),
    }


def best_temperature(train_fit, heldout_rows) -> tuple[float, dict[float, float]]:
    curve = tempered_heldout(train_fit, heldout_rows, TEMPERATURES)
    return max(curve, key=curve.get), curve


def decomposition_rows(world, models, seed: int) -> list[dict]:
    """The archive's and the structureless control's posterior statistics, at T = 1 and at the
    held-out-chosen T (module text)."""
    k = models.n_components
    archive = np.asarray(world.archive, np.float64)
    rows = []
    held_rows = archive[models.heldout_rows]
    t_best, _ = best_temperature(models.train_fit, held_rows)
    for label, t in (("T = 1", 1.0), ("held-out best T", t_best)):
        stats = posterior_stats(tempered(models.movmf, t).posterior(world.heldout))
        rows.append({"cloud": "phantom archive", "responsibilities": label, "T": t, **stats})
    fitted, part, train, test = structureless_control(archive, len(world.heldout), k, seed)
    split = len(part_rows(train))
    t_cloud, _ = best_temperature(part, train[split:])
    for label, t in (("T = 1", 1.0), ("held-out best T", t_cloud)):
        stats = posterior_stats(tempered(fitted, t).posterior(test))
        rows.append({"cloud": "structureless control", "responsibilities": label, "T": t, **stats})
    for row in rows:
        row.update({"K": k, "max entropy log K": float(np.log(k))})
    return rows


def purity(assignment: np.ndarray, truth: pd.DataFrame) -> tuple[float, float]:
    """(Σ_k N_k/N · max(rate, 1 − rate) averaged over findings, the same for one cluster)."""
    values = truth[list(FINDINGS)].to_numpy() > 0.5
    total, base = 0.0, 0.0
    for j in range(values.shape[1]):
        p = values[:, j].mean()
        base += max(p, 1 - p)
        for k in np.unique(assignment):
            members = values[assignment == k, j]
            rate = members.mean()
            total += len(members) / len(values) * max(rate, 1 - rate)
    return total / values.shape[1], base / values.shape[1]


def combination_names(truth: pd.DataFrame) -> list[str]:
    values = truth[list(FINDINGS)].to_numpy() > 0.5
    return [",".join(np.asarray(FINDINGS)[row]) or "none" for row in values]


def purity_rows(world, models, seed: int) -> list[dict]:
    """Top-component purity and NMI: the mixture, spherical k-means (same K), random sizes."""
    from sklearn.metrics import normalized_mutual_info_score

    k = models.n_components
    top = models.movmf.posterior(world.heldout).argmax(axis=1)
    both = np.vstack([world.archive, world.heldout]).astype(np.float64)
    kmeans = spherical_kmeans_labels(both, k, seed)[len(world.archive) :]
    shuffled = np.random.default_rng(seed).permutation(top)
    combos = combination_names(world.heldout_truth)
    rows = []
    for name, assignment in (
        ("movmf top component", top),
        ("spherical k-means (same K)", kmeans),
        ("random, same sizes (chance)", shuffled),
    ):
        value, base = purity(assignment, world.heldout_truth)
        rows.append(
            {
                "assignment": name,
                "K": k,
                "finding purity": value,
                "base rate purity": base,
                "NMI with finding combination": float(
                    normalized_mutual_info_score(combos, assignment)
                ),
            }
        )
    return rows


def _unit(rows):
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def _label_table(truth: pd.DataFrame) -> pd.DataFrame:
    table = truth[list(FINDINGS)].astype(np.float64).copy()
    table[NO_FINDING] = (truth[list(PATHOLOGIES)].to_numpy() < 0.5).all(axis=1).astype(float)
    return table


def anchor_cosines(model, anchors: PolarAnchors) -> np.ndarray:
    """(K, N) cosines between what sets each component apart from the archive's mean direction
    and what sets each sentence apart from the mean sentence (past the modality gap)."""
    from chexretrieve.geometry.bessel import vmf_mean_length

    texts = anchors.embeddings - anchors.embeddings.mean(axis=0)
    lengths = vmf_mean_length(model.dim, model.concentrations)
    offsets = model.directions - (model.weights * lengths) @ model.directions
    return _unit(offsets) @ _unit(texts).T


def component_names(world, models, anchors: PolarAnchors | None) -> pd.DataFrame:
    """Per component (heaviest first): weight, dominant labels, nearest positive and negative
    anchor sentences, whether the nearest sentence agrees with the labels (module text)."""
    model = models.movmf
    posterior = model.posterior(world.archive)
    labels = _label_table(world.archive_truth)
    values = labels.to_numpy()
    base = values.mean(axis=0)
    mass = posterior.sum(axis=0)
    rates = (posterior.T @ values) / np.maximum(mass[:, None], 1e-12)
    names = list(labels.columns)
    # enriched: 1.5 x the archive's rate, or halfway to 1 for a label most images carry (No
    # Finding in a mostly normal archive could never reach 1.5 x)
    lift = np.minimum(LABEL_LIFT * base, (1 + base) / 2)
    nearest_pos, nearest_neg, nearest_any = [None] * len(mass), [None] * len(mass), None
    if anchors is not None and anchors.embeddings is not None:
        cosines = anchor_cosines(model, anchors)
        polarity = np.asarray(anchors.polarity)
        nearest_any = np.argmax(cosines, axis=1)
        masked_pos = np.where(polarity == "positive", cosines, -np.inf)
        masked_neg = np.where(polarity == "negative", cosines, -np.inf)
        nearest_pos = list(np.argmax(masked_pos, axis=1))
        nearest_neg = list(np.argmax(masked_neg, axis=1))
    rows = []
    for k in np.argsort(-model.weights, kind="stable"):
        enriched = (rates[k] >= LABEL_RATE) & (rates[k] >= lift) & (mass[k] >= 1.0)
        dominant = [names[j] for j in np.argsort(-rates[k], kind="stable") if enriched[j]]
        row = {
            "component": int(k),
            "weight": float(model.weights[k]),
            "dominant true labels": ", ".join(dominant) or "none (mixed)",
        }
        if nearest_any is not None:
            j = int(nearest_any[k])
            row["nearest positive anchor"] = _sentence(anchors, nearest_pos[k])
            row["nearest negative anchor"] = _sentence(anchors, nearest_neg[k])
            row["nearest overall"] = anchors.polarity[j]
            row["anchor agrees with labels"] = _agrees(anchors, j, dominant) if dominant else None
        rows.append(row)
    return pd.DataFrame(rows).set_index("component")


def _sentence(anchors: PolarAnchors, j) -> str:
    return f"{anchors.findings[int(j)]}: {anchors.sentences[int(j)]}"


def _agrees(anchors: PolarAnchors, j: int, dominant: list[str]) -> bool:
    if anchors.polarity[j] == "positive":
        return anchors.findings[j] in dominant
    return NO_FINDING in dominant


def naming_summary(world, models, anchors: PolarAnchors | None, seed: int) -> dict:
    """Share of the weight with a dominant label (No Finding included), and how often the
    nearest anchor sentence agrees with the labels, beside chance."""
    table = component_names(world, models, anchors)
    labelled = table["dominant true labels"] != "none (mixed)"
    out = {
        "components": len(table),
        "with a dominant label": int(labelled.sum()),
        "their weight": float(table.loc[labelled, "weight"].sum()),
        "No Finding components' weight": float(
            table.loc[table["dominant true labels"].str.contains(NO_FINDING), "weight"].sum()
        ),
    }
    if anchors is None or "anchor agrees with labels" not in table:
        return out
    agree = table.loc[labelled, "anchor agrees with labels"].astype(bool).to_numpy()
    weights = table.loc[labelled, "weight"].to_numpy()
    out["anchor agreement"] = float(agree.mean()) if len(agree) else float("nan")
    out["anchor agreement, by weight"] = (
        float((agree * weights).sum() / weights.sum()) if len(agree) else float("nan")
    )
    # chance: each labelled component gets the nearest sentence of a random component
    nearest = np.argmax(anchor_cosines(models.movmf, anchors), axis=1)
    dominant = {
        int(k): [s.strip() for s in v.split(",")]
        for k, v in table.loc[labelled, "dominant true labels"].items()
    }
    rng = np.random.default_rng(seed)
    keys = list(dominant)
    chance = []
    for _ in range(CHANCE_PERMUTATIONS):
        shuffled = rng.permutation(nearest)
        chance.append(np.mean([_agrees(anchors, int(shuffled[k]), dominant[k]) for k in keys]))
    out["anchor agreement by chance"] = float(np.mean(chance)) if keys else float("nan")
    return out
