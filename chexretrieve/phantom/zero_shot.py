"""Zero-shot AUROC of an encoder on the phantom validation split, one finding at a time.

For each finding the encoder scores an image by the softmax over the prompt pair ("{}", "no {}")
(the finding's name in lower case) of the positive prompt's logit, as CheXzero's zero-shot
evaluation does. Two references are reported: the report-derived CheXpert labels with uncertain (-1)
and blank (not mentioned) cases left out, as in CheXpert-style evaluation, and the generator's truth
over every case.

The validation split holds patients the phantom encoder never trained on (the generator splits by
patient); cases are drawn in index order from the world ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from chexretrieve.encoders.base import Encoder
from chexretrieve.findings import FINDINGS
from chexretrieve.phantom.config import PhantomConfig
from chexretrieve.phantom.splits import generator_fingerprint, split_indices

#: the evaluation prompt pair ({} = the finding's name in lower case)
EVALUATION_PROMPTS = ("{}", "no {}")


@dataclass(frozen=True)
class FindingAuroc:
    """One finding's zero-shot result."""

    finding: str
    auroc_labels: (
        float  # against reported labels 1 vs 0 (uncertain and blank left out); nan if one class
    )
    positives_labels: int  # cases labelled 1
    negatives_labels: int  # cases labelled 0
    auroc_truth: float  # against the generator's truth over all cases; nan if one class
    positives_truth: int  # cases where the finding is truly present


def zero_shot_scores(encoder: Encoder, image_embeddings: np.ndarray) -> dict[str, np.ndarray]:
    """Per finding, each image's softmax probability of the positive prompt of the pair."""
    positive, negative = EVALUATION_PROMPTS
    names = [name.lower() for name in FINDINGS]
    prompts = encoder.embed_texts(
        [positive.format(n) for n in names] + [negative.format(n) for n in names]
    )
    margin = (
        encoder.inv_temperature
        * image_embeddings
        @ (prompts[: len(names)] - prompts[len(names) :]).T
    )
    probability = 1.0 / (1.0 + np.exp(-margin.astype(np.float64)))
    return {name: probability[:, k] for k, name in enumerate(FINDINGS)}


def _auroc(truth: np.ndarray, score: np.ndarray) -> float:
    if truth.size == 0 or truth.min() == truth.max():
        return float("nan")
    return float(roc_auc_score(truth, score))


def finding_aurocs(
    scores: dict[str, np.ndarray],
    labels: Sequence[dict[str, float]],
    truth: Sequence[dict[str, bool]],
) -> list[FindingAuroc]:
    """AUROC per finding against the labels (1 vs 0 only) and against the truth."""
    results = []
    for name in FINDINGS:
        score = scores[name]
        label = np.array([case[name] for case in labels], dtype=np.float64)
        known = (label == 1.0) | (label == 0.0)
        present = np.array([bool(case[name]) for case in truth])
        results.append(
            FindingAuroc(
                finding=name,
                auroc_labels=_auroc(label[known], score[known]),
                positives_labels=int((label == 1.0).sum()),
                negatives_labels=int((label == 0.0).sum()),
                auroc_truth=_auroc(present.astype(np.int64), score),
                positives_truth=int(present.sum()),
            )
        )
    return results


def evaluate_zero_shot(
    encoder: Encoder,
    seed: int = 0,
    n_cases: int = 3000,
    config: PhantomConfig | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = 64,
) -> tuple[list[FindingAuroc], list[int]]:
    """Zero-shot AUROC per finding on the first ``n_cases`` validation cases of world ``seed``."""
    from chexretrieve.phantom import generate_case

    config = config or PhantomConfig()
    indices = split_indices(seed, "valid", n_cases, config)
    embeddings, labels, truth = [], [], []
    for start in range(0, len(indices), batch):
        cases = [generate_case(seed, i, config) for i in indices[start : start + batch]]
        embeddings.append(encoder.embed_images([case.image for case in cases]))
        labels += [case.labels for case in cases]
        truth += [case.truth for case in cases]
        if progress is not None:
            progress(len(cases))
    scores = zero_shot_scores(encoder, np.concatenate(embeddings))
    return finding_aurocs(scores, labels, truth), indices


def mean_auroc(results: Sequence[FindingAuroc], field: str) -> float:
    """Mean over the findings where the AUROC is defined."""
    values = [getattr(r, field) for r in results if not math.isnan(getattr(r, field))]
    return float(np.mean(values)) if values else float("nan")


def auroc_table(results: Sequence[FindingAuroc]) -> str:
    """A Markdown table of the per-finding results with the means as the last row."""

    def cell(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.3f}"

    lines = [
        "| finding | AUROC (labels 1 vs 0) | labelled 1 / 0 | AUROC (truth) | truly present |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.finding} | {cell(r.auroc_labels)} | {r.positives_labels} / "
            f"{r.negatives_labels} | {cell(r.auroc_truth)} | {r.positives_truth} |"
        )
    lines.append(
        f"| **mean** | **{cell(mean_auroc(results, 'auroc_labels'))}** | | "
        f"**{cell(mean_auroc(results, 'auroc_truth'))}** | |"
    )
    return "\n".join(lines)


def describe_encoder(encoder: Any) -> str:
    """One line naming the encoder and where its weights came from."""
    from chexretrieve.encoders.phantom import BUNDLED_WEIGHTS_DIR

    source = getattr(encoder, "source", None)
    if source is not None and Path(source).resolve().parent == BUNDLED_WEIGHTS_DIR:
        source = f"the bundled chexretrieve/encoders/weights/{Path(source).name}"
    return f"`{encoder.encoder_id}`" + (f" ({source})" if source else "")


def zero_shot_report(
    encoder: Any, results: Sequence[FindingAuroc], command: str, seed: int, config: PhantomConfig
) -> str:
    """The Markdown page written to eval/phantom_zero_shot.md: what was measured, how, the table."""
    provenance = getattr(encoder, "provenance", {}) or {}
    trained = provenance.get("generator", {})
    lines = [
        "# Phantom encoder: zero-shot AUROC on the phantom validation split",
        "",
        "SIMULATION: synthetic phantoms scored by a model trained on synthetic phantoms; these "
        "figures say nothing about real radiographs.",
        "",
        f"- encoder: {describe_encoder(encoder)}",
        f"- world: seed {seed}, validation split (patients never trained on), "
        f"{config.size} px phantoms, prevalence {config.prevalence}",
        f"- trained on: seed {trained.get('seed', '?')}, training split, "
        f"{trained.get('size', '?')} px phantoms, prevalence {trained.get('prevalence', '?')}",
        '- score: softmax over the prompt pair ("{}", "no {}") of the positive prompt\'s logit, '
        "the finding's name in lower case",
        "- labels: the report-derived CheXpert labels, 1 vs 0 (uncertain -1 and blank left out); "
        "truth: the generator's ground truth over every case",
        f"- supervision: {supervision_note(provenance)}",
        f"- generator: {generator_status(provenance)}",
        f"- reproduce: `{command}`",
        "",
        auroc_table(results),
        "",
    ]
    return "\n".join(lines)


def generator_status(provenance: dict[str, Any]) -> str:
    """Whether today's generator still draws the training phantoms the weights were trained on."""
    from dataclasses import fields

    from chexretrieve.phantom import generate_case

    recorded = provenance.get("generator_fingerprint")
    world = provenance.get("generator", {})
    if not recorded or "seed" not in world:
        return "unknown (the weights record no generator fingerprint)"
    names = {f.name for f in fields(PhantomConfig)}
    config = PhantomConfig(**{k: v for k, v in world.items() if k in names})
    seed = int(world["seed"])
    cases = [generate_case(seed, i, config) for i in split_indices(seed, "train", 8, config)]
    current = generator_fingerprint(cases)
    if current == recorded:
        return f"fingerprint {recorded}: today's generator draws the same training phantoms"
    return (
        f"CHANGED since training (fingerprint {recorded} then, {current} now): retrain with "
        "`chexretrieve phantom train`"
    )


def supervision_note(provenance: dict[str, Any]) -> str:
    """What the training saw besides report text, so the table is read for what it is."""
    prompts = provenance.get("training_prompts")
    weight = provenance.get("training", {}).get("prompt_loss_weight")
    if not prompts or not weight:
        return "report text only (CLIP loss)"
    shown = "; ".join(f'"{p}" / "{n}"' for p, n in prompts)
    return (
        f"besides the report CLIP loss, a finding-prompt loss (weight {weight}) against the "
        f"generator's truth with the pairs {shown}; the evaluation pair itself was never trained "
        "on, so the table is zero-shot in its prompts, not in its supervision"
    )
