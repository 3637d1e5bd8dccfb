"""The seed's three claims and the evaluation's own checks, decided from the runs (text follows
the numbers; every figure is a mean with its range over runs).

* OOD: per group family, MovMF − Gaussian with the number of runs whose bootstrap interval puts
  each ahead (:func:`chexretrieve.evaluation.density_summary.difference_table`).
* Long tail: the abnormality-matched AUROC of each model, and whether MovMF's exceeds the
  Gaussian's; the unmatched figure beside it.
* Decomposition: a decomposition *is one* only if an image is a graded blend of components
  (:func:`decomposition_verdict`); a sparse posterior is evidence of concepts only if it is
  sparser than a structureless cloud's, fitted the same way; as a clustering, the top component
  must be purer than spherical k-means with the same K.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from chexretrieve.evaluation.density_ood import CONTROL, DISPLAY_ALL, FAR_ALL, NEAR_ALL
from chexretrieve.evaluation.density_summary import spread

#: responsibilities count as graded when an image is on average a blend of this many components
#: (exp of the entropy)
GRADED_COMPONENTS = 1.5
#: the archive's sparsity is evidence of concepts only when it needs this many fewer components
#: for 90 % of the posterior than the structureless control
SPARSITY_MARGIN = 0.1


def run_verdict(ahead: int, behind: int, runs: int, points=None) -> str:
    """The claim "MovMF is better" from the runs whose paired interval puts MovMF ahead (above 0)
    or behind (below 0), and the runs' point estimates ``points`` (MovMF − Gaussian): holds / does
    not hold when every run's interval agrees; "on average" when every point estimate agrees in
    sign and no interval says the opposite; else not decided."""
    if behind == runs:
        return "does not hold"
    if ahead == runs:
        return "holds"
    signs = np.sign(np.asarray(points if points is not None else [], dtype=np.float64))
    if len(signs) == runs and (signs < 0).all() and ahead == 0:
        return "does not hold on average"
    if len(signs) == runs and (signs > 0).all() and behind == 0:
        return "holds on average"
    return "not decided"


def _verdict_counts(differences: pd.DataFrame, group: str) -> tuple[str, str]:
    part = differences[differences["group"] == group]
    runs = len(part)
    movmf = int((part["lower"] > 0).sum())
    gaussian = int((part["upper"] < 0).sum())
    verdict = run_verdict(movmf, gaussian, runs, part["MovMF - Gaussian"])
    text = (
        f"MovMF − Gaussian {spread(part['MovMF - Gaussian'])}; Gaussian ahead (interval below 0) "
        f"in {gaussian} of {runs} runs, MovMF ahead in {movmf}"
    )
    return verdict, text


def ood_claim(ood: pd.DataFrame, differences: pd.DataFrame) -> list[str]:
    near_verdict, near_text = _verdict_counts(differences, NEAR_ALL)
    head = f"1. **Better OOD detection than a Gaussian model: {near_verdict}**"
    lines = [f"{head} on the near shifts"]
    auc = ood[ood["group"] == NEAR_ALL].groupby("model")["AUROC"].apply(spread)
    lines[0] += (
        f" (AUROC MovMF {auc.get('movmf', '')}, Gaussian {auc.get('gaussian', '')}, k-NN "
        f"{auc.get('knn', '')}, one vMF {auc.get('movmf K=1', '')}; {near_text})."
    )
    for group in (DISPLAY_ALL, FAR_ALL):
        verdict, text = _verdict_counts(differences, group)
        auc = ood[ood["group"] == group].groupby("model")["AUROC"].apply(spread)
        lines.append(
            f"   - {group}: {verdict} (MovMF {auc.get('movmf', '')}, Gaussian "
            f"{auc.get('gaussian', '')}; {text})."
        )
    return lines


def tail_claim(tail: pd.DataFrame) -> list[str]:
    matched = tail.groupby("model", sort=False)["matched AUROC"]
    unmatched = tail.groupby("model", sort=False)["unmatched AUROC (rare vs 5 most common)"]
    movmf = tail[tail["model"] == "movmf"]
    runs = len(movmf)
    ahead = int((movmf["MovMF - Gaussian lower"] > 0).sum())
    behind = int((movmf["MovMF - Gaussian upper"] < 0).sum())
    verdict = run_verdict(ahead, behind, runs, movmf["MovMF - Gaussian"])
    over_chance = int((movmf["lower"] > 0.5).sum())
    return [
        f"2. **Better long-tail detection than a Gaussian model: {verdict}.** Matched for "
        f"abnormality (rare finding combinations against not-rare ones with the same number of "
        f"pathologies), AUROC of low density: MovMF {spread(matched.get_group('movmf'))}, "
        f"Gaussian {spread(matched.get_group('gaussian'))}, k-NN "
        f"{spread(matched.get_group('knn'))}, one vMF {spread(matched.get_group('movmf K=1'))}; "
        f"MovMF − Gaussian {spread(movmf['MovMF - Gaussian'])}, its paired interval above 0 in "
        f"{ahead} and below 0 in {behind} of {runs} runs; MovMF's own interval above 0.5 in "
        f"{over_chance} of {runs} runs. Unmatched (rare vs the five most common combinations, "
        f"the old test, which measures abnormality): MovMF "
        f"{spread(unmatched.get_group('movmf'))}, one vMF "
        f"{spread(unmatched.get_group('movmf K=1'))}."
    ]


def decomposition_verdict(decomposition: pd.DataFrame, purity: pd.DataFrame) -> dict:
    """graded: an image is on average a blend of at least ``GRADED_COMPONENTS`` components
    (exp of the responsibility entropy at the held-out-best temperature); sparsity is evidence:
    the archive needs fewer components for 90 % than the structureless control (a cloud with
    no concepts); purer than k-means: the top component predicts findings better than a hard
    spherical k-means with the same K."""
    best = decomposition[decomposition["responsibilities"] == "held-out best T"]
    blend = best[best["cloud"] == "phantom archive"]["effective components exp(H)"].mean()
    plain = decomposition[decomposition["responsibilities"] == "T = 1"]
    needed = plain.groupby("cloud")["components for 90 %"].mean()
    names = purity["assignment"]
    mixture = purity.loc[names == "movmf top component", "finding purity"].mean()
    kmeans = purity.loc[names.str.startswith("spherical"), "finding purity"].mean()
    return {
        "graded": bool(blend >= GRADED_COMPONENTS),
        "sparser than the control": bool(
            needed["phantom archive"] < needed["structureless control"] - SPARSITY_MARGIN
        ),
        "purer than k-means": bool(mixture > kmeans),
    }


def decomposition_claim(decomposition: pd.DataFrame, purity: pd.DataFrame, naming) -> list[str]:
    verdict = decomposition_verdict(decomposition, purity)
    cells = decomposition.groupby(["cloud", "responsibilities"], sort=False)

    def cell(cloud, kind, column):
        return spread(cells.get_group((cloud, kind))[column])

    temps = spread(
        decomposition[(decomposition["cloud"] == "phantom archive")
                      & (decomposition["responsibilities"] == "held-out best T")]["T"]
    )  # fmt: skip
    if verdict["graded"]:
        head = "graded: an image is a blend of components"
    else:
        head = "not a decomposition: a hard assignment to one cluster"
    needed = decomposition[decomposition["responsibilities"] == "T = 1"].groupby("cloud")[
        "components for 90 %"
    ]
    archive_needs = spread(needed.get_group("phantom archive"))
    control_needs = spread(needed.get_group("structureless control"))
    sparsity = (
        f"The archive needs {archive_needs} components for 90 % of an image's posterior, the "
        f"structureless cloud {control_needs}: "
    )
    if verdict["sparser than the control"]:
        sparsity += (
            "the archive is clustered, but a near one-hot posterior is what a mixture fit gives "
            "even without any structure, so sparsity is no evidence of a decomposition into "
            "several concepts"
        )
    else:
        sparsity += "the sparsity is a property of the fit, not of the archive"
    cluster = "purer" if verdict["purer than k-means"] else "no purer"
    pure = purity.groupby("assignment", sort=False)["finding purity"].apply(spread)
    archive_entropy = cell("phantom archive", "T = 1", "mean entropy (nats)")
    lines = [
        f"3. **A sparse decomposition into interpretable concepts: {head}.** Mean "
        f"responsibility entropy on held-out phantoms {archive_entropy} "
        f"nats (at most log K = {spread(decomposition['max entropy log K'])}); a structureless "
        f"Gaussian cloud with the archive's covariance, fitted the same way, gives "
        f"{cell('structureless control', 'T = 1', 'mean entropy (nats)')}. Effective components "
        f"exp(H): archive {cell('phantom archive', 'T = 1', 'effective components exp(H)')}, "
        f"control {cell('structureless control', 'T = 1', 'effective components exp(H)')}; "
        f"share of images with > 0.99 on one component: archive "
        f"{cell('phantom archive', 'T = 1', 'share with top > 0.99')}, control "
        f"{cell('structureless control', 'T = 1', 'share with top > 0.99')}. Tempering (κ / T, "
        f"T chosen on the held-out likelihood: {temps}) leaves the archive at "
        f"{cell('phantom archive', 'held-out best T', 'mean entropy (nats)')} nats. Top-component "
        f"finding purity {pure.get('movmf top component', '')} vs spherical k-means "
        f"{pure.get('spherical k-means (same K)', '')} and a random assignment "
        f"{pure.get('random, same sizes (chance)', '')}. {sparsity}; as a clustering the "
        f"mixture is {cluster} than spherical k-means.",
    ]
    if naming is not None and "anchor agreement" in naming:
        normal = spread(naming["No Finding components' weight"])
        lines.append(
            f"   Naming: {spread(naming['their weight'])} of the mixture's weight is in components "
            f"with a dominant true label (No Finding counted; No Finding components hold "
            f"{normal}); the nearest anchor sentence "
            f"(both polarities) agrees with those labels in {spread(naming['anchor agreement'])} "
            f"of them ({spread(naming['anchor agreement, by weight'])} of their weight), chance "
            f"{spread(naming['anchor agreement by chance'])}."
        )
    return lines


def checks_text(control: dict, known: pd.DataFrame) -> list[str]:
    allowed = control["allowed distance from 0.5"]
    means = ", ".join(
        f"{m} {v:.3f} (± {allowed[m]:.3f} allowed)" for m, v in control["mean AUROC"].items()
    )
    covered = 100 * control["share of run intervals covering 0.5"]
    failed = known[known["check"] != "passed"]
    lines = [
        f"- **In-distribution control ({CONTROL}): {control['check']}.** More phantoms of the "
        f"same world scored as if they were OOD must give about 0.5 (within 0.02, or 3 standard "
        f"errors of the mean over worlds when wider): mean AUROC {means}; the "
        f"per-run interval covers 0.5 in {covered:.0f} % of runs.",
        f"- **Known-answer worlds: {'passed' if failed.empty else 'FAILED'}** "
        f"({len(known) - len(failed)} of {len(known)} checks): on a true vMF mixture MovMF must "
        "win, on a stretched Gaussian cloud the Gaussian (by at least 0.05 AUROC); the table "
        "below has every seed.",
    ]
    return lines
