"""The phantom world's statistics: co-occurrence, prevalence, patients and the split."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from chexretrieve.findings import FINDINGS
from chexretrieve.phantom import PhantomConfig, describe_case
from chexretrieve.phantom.report import aggregate_labels, negative_mentions

N = 900


@pytest.fixture(scope="module")
def world():
    cases = [describe_case(11, i, PhantomConfig(size=64)) for i in range(N)]
    truth = {name: np.array([c.truth[name] for c in cases]) for name in FINDINGS}
    return cases, truth


def _rate(mask: np.ndarray, given: np.ndarray) -> float:
    return float(mask[given].mean())


def test_findings_co_occur_as_designed(world) -> None:
    cases, t = world
    ap = np.array([c.nuisance["view"] == "AP" for c in cases])
    pairs = [
        ("Edema", "Cardiomegaly"),
        ("Pleural Effusion", "Edema"),
        ("Consolidation", "Pneumonia"),
        ("Atelectasis", "Pleural Effusion"),
        ("Fracture", "Pneumothorax"),
    ]
    for effect, cause in pairs:
        with_cause, without = _rate(t[effect], t[cause]), _rate(t[effect], ~t[cause])
        assert with_cause > 2.0 * without, (effect, cause, with_cause, without)
    assert _rate(t["Support Devices"], ap) > 2.0 * _rate(t["Support Devices"], ~ap)
    # Lung Opacity is the umbrella of the airspace findings
    for cause in ("Consolidation", "Pneumonia", "Edema", "Atelectasis", "Lung Lesion"):
        assert t["Lung Opacity"][t[cause]].all()


def test_prevalences_are_in_a_useful_range(world) -> None:
    cases, t = world
    for name in FINDINGS:
        assert 0.02 < t[name].mean() < 0.5, (name, t[name].mean())
    normal = ~np.any([t[n] for n in FINDINGS], axis=0)
    assert 0.15 < normal.mean() < 0.5
    ap = np.mean([c.nuisance["view"] == "AP" for c in cases])
    assert 0.25 < ap < 0.45


def test_patients_have_several_studies_and_one_split(world) -> None:
    cases, _ = world
    by_patient = defaultdict(list)
    for case in cases:
        by_patient[case.metadata["patient_id"]].append(case)
    sizes = np.array([len(v) for v in by_patient.values()])
    assert (sizes >= 2).sum() >= 40 and (sizes == 1).sum() >= 60
    for studies in by_patient.values():
        assert len({c.metadata["split"] for c in studies}) == 1
        assert len({c.metadata["sex"] for c in studies}) == 1
        assert len({c.metadata["birth_date"] for c in studies}) == 1
        dates = [c.metadata["study_date"] for c in sorted(studies, key=lambda c: c.index)]
        assert dates == sorted(dates)
        assert [c.metadata["study_number"] for c in studies] == list(range(len(studies)))
    valid = np.mean([v[0].metadata["split"] == "valid" for v in by_patient.values()])
    assert 0.07 < valid < 0.18


def test_chronic_findings_persist_for_a_patient(world) -> None:
    cases, _ = world
    by_patient = defaultdict(list)
    for case in cases:
        by_patient[case.metadata["patient_index"]].append(case)
    checked = 0
    for studies in by_patient.values():
        lesions = [c.attributes["Lung Lesion"] for c in studies if c.truth["Lung Lesion"]]
        if len(lesions) == len(studies) >= 2:
            assert all(a["spots"] == lesions[0]["spots"] for a in lesions)
            checked += 1
    assert checked >= 1


def test_label_aggregation_follows_chexpert() -> None:
    labels = aggregate_labels(
        [
            ("Possible pneumonia.", {"Pneumonia": -1.0}),
            ("Right lower lobe pneumonia.", {"Pneumonia": 1.0, "Lung Opacity": 1.0}),
            ("Cannot exclude effusion.", {"Pleural Effusion": -1.0}),
            ("No pleural effusion.", {"Pleural Effusion": 0.0}),
            ("No pneumothorax.", {"Pneumothorax": 0.0}),
        ]
    )
    assert labels["Pneumonia"] == 1.0 and labels["Lung Opacity"] == 1.0
    assert labels["Pleural Effusion"] == -1.0 and labels["Pneumothorax"] == 0.0
    assert np.isnan(labels["Fracture"])


def test_combined_negations_label_every_listed_finding() -> None:
    rng = np.random.default_rng(0)
    found = False
    for _ in range(20):
        mentions = negative_mentions(["Pneumothorax", "Pleural Effusion", "Consolidation"], rng)
        labels = aggregate_labels(mentions)
        assert all(labels[n] == 0.0 for n in ("Pneumothorax", "Pleural Effusion", "Consolidation"))
        found = found or len(mentions) == 1
    assert found, "the merged 'No X, Y, or Z.' sentence never appeared"


def test_zero_prevalence_gives_only_normal_cases() -> None:
    config = PhantomConfig(size=64, prevalence=0.0)
    for index in range(100):
        case = describe_case(0, index, config)
        assert not any(case.truth.values())
        assert not any(v == 1.0 for v in case.labels.values())
