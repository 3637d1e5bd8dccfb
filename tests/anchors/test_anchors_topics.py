"""Rule-based topicality and polarity, measured against the labelled authored sentences."""

from __future__ import annotations

import pytest

from chexretrieve.anchors import latest_anchor_set, latest_variants
from chexretrieve.anchors.topics import (
    FINDING_TERMS,
    infer_polarity,
    mentions_finding,
    on_topic_fraction,
)
from chexretrieve.findings import FINDINGS


@pytest.fixture(autouse=True)
def _repo_anchors(monkeypatch):
    monkeypatch.delenv("CHEXRETRIEVE_ANCHORS", raising=False)


def test_every_finding_has_terms() -> None:
    assert set(FINDING_TERMS) == set(FINDINGS)
    assert all(terms == tuple(t.lower() for t in terms) for terms in FINDING_TERMS.values())


@pytest.mark.parametrize(
    ("sentence", "polarity"),
    [
        ("No pleural effusion.", "negative"),
        ("There is no pneumothorax.", "negative"),
        ("The heart is not enlarged.", "negative"),
        ("The costophrenic angles are sharp.", "negative"),
        ("Interval removal of the endotracheal tube.", "negative"),
        ("Pneumonia cannot be excluded.", "positive"),
        ("Superimposed infection is not excluded.", "positive"),
        ("Opacity concerning for pneumonia.", "positive"),
        ("There are nodular opacities in both lungs.", "positive"),
        ("Small left pleural effusion.", "positive"),
    ],
)
def test_infer_polarity_examples(sentence, polarity) -> None:
    assert infer_polarity(sentence) == polarity


def test_infer_polarity_agrees_with_the_authored_labels() -> None:
    pairs = [(e.text, e.polarity) for f in FINDINGS for s in latest_variants(f) for e in s.entries]
    agreement = sum(infer_polarity(t) == p for t, p in pairs) / len(pairs)
    assert len(pairs) >= 13 * 5 * 40
    assert agreement >= 0.98, agreement  # measured 0.993 (in-sample: the rules were tuned here)
    broad = latest_anchor_set("broad/clinical")
    held_out = sum(infer_polarity(e.text) == e.polarity for e in broad.entries) / len(broad)
    assert held_out >= 0.93, held_out  # measured 0.963 on text the rules were not tuned on


def test_topicality_separates_findings() -> None:
    assert mentions_finding("Small left pleural effusion.", "pleural effusion")
    assert not mentions_finding("The weather is nice.", "Pleural Effusion")
    cardiac = latest_anchor_set("Cardiomegaly", "a").sentences
    assert on_topic_fraction(list(cardiac), "Cardiomegaly") == 1.0
    assert on_topic_fraction(list(cardiac), "Pneumothorax") < 0.2
    assert on_topic_fraction([], "Edema") == 0.0
