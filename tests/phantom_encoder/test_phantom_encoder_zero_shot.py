"""Zero-shot scoring and AUROC bookkeeping against naive references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chexretrieve.findings import FINDINGS
from chexretrieve.phantom.config import PhantomConfig
from chexretrieve.phantom.sampling import patient_of
from chexretrieve.phantom.zero_shot import (
    FindingAuroc,
    auroc_table,
    finding_aurocs,
    mean_auroc,
    split_indices,
    zero_shot_scores,
)


class _LookupEncoder:
    """Texts map to fixed unit vectors; 'x' and 'no x' point along +e_k and -e_k."""

    encoder_id = "fake:0"
    inv_temperature = 10.0
    embed_dim = len(FINDINGS)

    def embed_texts(self, texts):
        out = np.zeros((len(texts), self.embed_dim), np.float32)
        names = [n.lower() for n in FINDINGS]
        for i, text in enumerate(texts):
            negated = text.startswith("no ")
            k = names.index(text[3:] if negated else text)
            out[i, k] = -1.0 if negated else 1.0
        return out


def test_zero_shot_score_is_the_softmax_of_the_prompt_pair():
    images = np.random.default_rng(0).normal(size=(4, len(FINDINGS))).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    scores = zero_shot_scores(_LookupEncoder(), images)
    for k, name in enumerate(FINDINGS):
        logits = np.stack([10.0 * images[:, k], -10.0 * images[:, k]], axis=1)
        softmax = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        assert np.allclose(scores[name], softmax[:, 0])


def _naive_auroc(positive_scores, negative_scores):
    pairs = [(p > n) + 0.5 * (p == n) for p in positive_scores for n in negative_scores]
    return sum(pairs) / len(pairs)


def test_aurocs_leave_uncertain_and_blank_labels_out():
    rng = np.random.default_rng(1)
    n = 40
    score = rng.random(n)
    label_values = rng.choice([1.0, 0.0, -1.0, math.nan], size=n)
    truth_values = rng.random(n) < 0.4
    scores = {name: score for name in FINDINGS}
    labels = [{name: float(v) for name in FINDINGS} for v in label_values]
    truth = [{name: bool(v) for name in FINDINGS} for v in truth_values]
    result = finding_aurocs(scores, labels, truth)[0]
    expected = _naive_auroc(score[label_values == 1.0], score[label_values == 0.0])
    assert result.auroc_labels == pytest.approx(expected)
    assert result.positives_labels == int((label_values == 1.0).sum())
    assert result.negatives_labels == int((label_values == 0.0).sum())
    assert result.auroc_truth == pytest.approx(
        _naive_auroc(score[truth_values], score[~truth_values])
    )
    assert result.positives_truth == int(truth_values.sum())


def test_a_finding_with_one_class_has_no_auroc_and_is_left_out_of_the_mean():
    results = [
        FindingAuroc("A", 0.8, 3, 4, 0.7, 3),
        FindingAuroc("B", math.nan, 0, 7, 0.9, 2),
    ]
    assert mean_auroc(results, "auroc_labels") == pytest.approx(0.8)
    assert mean_auroc(results, "auroc_truth") == pytest.approx(0.8)
    table = auroc_table(results)
    assert "| B | n/a | 0 / 7 | 0.900 | 2 |" in table
    assert "| **mean** | **0.800** |" in table


def test_validation_indices_are_the_validation_patients():
    config = PhantomConfig(size=64)
    valid = split_indices(3, "valid", 12, config)
    train = split_indices(3, "train", 40, config)
    assert len(valid) == 12 and not set(valid) & set(train)
    assert all(patient_of(3, i, config).split == "valid" for i in valid)
    skipped = set(range(valid[-1])) - set(valid)
    assert all(patient_of(3, i, config).split == "train" for i in skipped)


@pytest.mark.parametrize(
    ("split", "count", "message"),
    [("test", 3, "unknown split 'test'"), ("valid", 0, "at least 1")],
)
def test_bad_split_requests_are_refused(split, count, message):
    with pytest.raises(ValueError, match=message):
        split_indices(0, split, count, PhantomConfig(size=64))


def test_generator_status_tells_whether_the_training_phantoms_changed():
    from dataclasses import asdict

    from chexretrieve.phantom import generate_case
    from chexretrieve.phantom.splits import generator_fingerprint
    from chexretrieve.phantom.zero_shot import generator_status

    world = PhantomConfig(size=64, prevalence=2.0)
    cases = [generate_case(1, i, world) for i in split_indices(1, "train", 8, world)]
    provenance = {
        "generator": {**asdict(world), "seed": 1, "split": "train"},
        "generator_fingerprint": generator_fingerprint(cases),
    }
    assert "draws the same training phantoms" in generator_status(provenance)
    provenance["generator_fingerprint"] = "0" * 16
    assert "CHANGED since training" in generator_status(provenance)
    assert "unknown" in generator_status({})
