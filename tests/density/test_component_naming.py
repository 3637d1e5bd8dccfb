"""Naming the archive mixture's components (issue 32): dominant labels include No Finding, and the
anchor sentence shown agrees with them (a positive sentence of a dominant finding, a negative one
for a No Finding component). On the phantom evaluation the unconstrained nearest sentence named
the heaviest, normal components "Abnormal mediastinal contour"."""

from __future__ import annotations

import numpy as np
import pandas as pd

from chexretrieve.density.archive import NO_FINDING, AnchorText, name_components
from chexretrieve.density.output import cluster_text
from chexretrieve.density.provider import ConceptShare
from chexretrieve.findings import FINDINGS
from chexretrieve.geometry.movmf_density import MovMFDensity

D = 8
E = np.eye(D)
#: three components: A (Cardiomegaly films), B (normal films), C (unlabelled images)
MODEL = MovMFDensity(np.array([0.25, 0.5, 0.25]), E[:3], np.full(3, 50.0))
IDS = np.arange(400)


def _labels() -> pd.DataFrame:
    labels = pd.DataFrame(np.nan, index=IDS, columns=list(FINDINGS))
    labels.iloc[:300] = 0.0
    labels.iloc[:100, FINDINGS.index("Cardiomegaly")] = 1.0  # A; B (100..299) has no pathology
    return labels  # C (300..399): no labels


def _posterior() -> np.ndarray:
    component = np.r_[np.zeros(100), np.ones(200), np.full(100, 2)].astype(int)
    return np.eye(3)[component]


def _unit(v):
    return v / np.linalg.norm(v)


def _anchors(polar: bool = True) -> list[AnchorText]:
    cardio = [_unit(0.9 * E[0] + 0.43 * E[3]), E[0]]  # the negative one is the nearer to A
    ecm = [E[1]]  # a positive sentence right on the normal component B
    effusion = [_unit(0.8 * E[1] + 0.6 * E[4])]
    fracture = [E[2]]
    vectors = cardio + ecm + effusion + fracture
    balance = -np.sum(vectors, axis=0)  # keeps the sentences' mean at 0 (no centring effect)
    texts = [
        AnchorText("Cardiomegaly", ("enlarged heart", "normal heart size"), np.array(cardio),
                   ("positive", "negative")),
        AnchorText("Enlarged Cardiomediastinum", ("widened mediastinum",), np.array(ecm),
                   ("positive",)),
        AnchorText("Pleural Effusion", ("no pleural fluid",), np.array(effusion), ("negative",)),
        AnchorText("Fracture", ("rib fracture", "no fracture"),
                   np.array(fracture + [balance]), ("positive", "negative")),
    ]  # fmt: skip
    if not polar:
        texts = [AnchorText(t.finding, t.sentences, t.embeddings) for t in texts]
    return texts


def test_no_finding_is_a_dominant_label_in_a_mostly_normal_archive():
    names = name_components(MODEL, _posterior(), IDS, _labels(), _anchors())
    assert names[0].labels == ("Cardiomegaly",)
    assert names[1].labels == (NO_FINDING,)  # 2/3 of the labelled archive is normal
    assert names[2].labels == () and names[2].labelled_mass == 0.0


def test_the_anchor_sentence_agrees_with_the_labels():
    names = name_components(MODEL, _posterior(), IDS, _labels(), _anchors())
    assert names[0].sentences[0] == "Cardiomegaly: enlarged heart"  # positive, of its finding
    assert names[1].sentences[0] == "Pleural Effusion: no pleural fluid"  # negative: normal
    assert names[2].sentences[0] == "Fracture: rib fracture"  # unlabelled: the nearest of all
    # without polarities (an older caller), or unconstrained, the nearest sentence contradicts
    plain = name_components(MODEL, _posterior(), IDS, _labels(), _anchors(polar=False))
    assert plain[0].sentences[0] == "Cardiomegaly: normal heart size"
    assert plain[1].sentences[0] == "Enlarged Cardiomediastinum: widened mediastinum"


def test_the_cluster_text_shows_one_component_unless_the_assignment_is_unclear():
    names = name_components(MODEL, _posterior(), IDS, _labels(), _anchors())
    clear = (ConceptShare(1, 0.999, names[1]),)
    assert cluster_text(clear) == names[1].text() and "%" not in cluster_text(clear)
    unclear = (ConceptShare(1, 0.6, names[1]), ConceptShare(0, 0.35, names[0]))
    text = cluster_text(unclear)
    assert "60 %" in text and "35 %" in text and "Cardiomegaly" in text
