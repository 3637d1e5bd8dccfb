"""The phantom generator: determinism, overrides, visible findings, label/truth consistency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chexretrieve.findings import FINDINGS
from chexretrieve.phantom import (
    PhantomCase,
    PhantomConfig,
    describe_case,
    generate_batch,
    generate_case,
)
from chexretrieve.phantom.sampling import OPACITY_CAUSES

SMALL = PhantomConfig(size=128)


def _same_labels(a: dict[str, float], b: dict[str, float]) -> bool:
    return all((math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in FINDINGS)


def test_case_has_the_promised_fields() -> None:
    case = generate_case(0, 5, SMALL)
    assert isinstance(case, PhantomCase)
    assert case.image.dtype == np.float32 and case.image.shape == (128, 128)
    assert 0.0 <= case.image.min() and case.image.max() <= 1.0
    assert set(case.labels) == set(FINDINGS) and set(case.truth) == set(FINDINGS)
    assert all(v in (0.0, 1.0, -1.0) or math.isnan(v) for v in case.labels.values())
    assert case.report == " ".join(case.sentences) and case.sentences
    for key in ("body_size", "rotation_deg", "inspiration", "exposure", "noise", "view", "marker"):
        assert key in case.nuisance
    for key in ("patient_id", "age", "sex", "study_date", "view", "patient_index", "split"):
        assert key in case.metadata
    assert case.metadata["view"] in ("AP", "PA") and case.metadata["sex"] in ("M", "F")
    assert "SYNTHETIC" in case.metadata["synthetic"]


def test_generation_is_deterministic_in_seed_and_index() -> None:
    a, b = generate_case(3, 11, SMALL), generate_case(3, 11, SMALL)
    assert a.image.tobytes() == b.image.tobytes()
    assert a.report == b.report and _same_labels(a.labels, b.labels)
    assert a.metadata == b.metadata and a.nuisance == b.nuisance
    assert not np.array_equal(a.image, generate_case(4, 11, SMALL).image)
    assert not np.array_equal(a.image, generate_case(3, 12, SMALL).image)
    batch = generate_batch(3, [11, 12], SMALL)
    assert batch[0].image.tobytes() == a.image.tobytes()
    described = describe_case(3, 11, SMALL)
    assert described.report == a.report and _same_labels(described.labels, a.labels)
    assert described.metadata == a.metadata and described.image.size == 0


def test_bad_arguments_are_rejected_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="size"):
        PhantomConfig(size=32)
    with pytest.raises(ValueError, match="size"):
        PhantomConfig(size=4096)
    with pytest.raises(ValueError, match="seed"):
        generate_case(-1, 0, SMALL)
    with pytest.raises(ValueError, match="index"):
        generate_case(0, -3, SMALL)
    with pytest.raises(ValueError, match="unknown finding"):
        generate_case(0, 0, SMALL, overrides={"Broken Heart": True})
    with pytest.raises(ValueError, match="contradict"):
        generate_case(0, 0, SMALL, overrides={"Lung Opacity": False, "Edema": True})


def _only(name: str | None) -> dict[str, bool]:
    overrides = {n: False for n in FINDINGS}
    if name is not None:
        overrides[name] = True
        if name in OPACITY_CAUSES:
            overrides.pop("Lung Opacity")
    return overrides


@pytest.mark.parametrize("finding", FINDINGS)
def test_every_finding_is_visible_and_changes_nothing_else(finding: str) -> None:
    """Switching a finding on changes the image clearly, and only the image's finding part."""
    config = PhantomConfig(size=128)
    for index in (2, 9):
        off = generate_case(7, index, config, overrides=_only(None))
        on = generate_case(7, index, config, overrides=_only(finding))
        assert on.truth[finding] and not off.truth[finding]
        assert on.nuisance == off.nuisance and on.metadata == off.metadata
        diff = np.abs(on.image - off.image)
        # a visible sign: enough pixels change by more than 4 % of the display range
        assert (diff > 0.04).sum() >= 12, (finding, index, int((diff > 0.04).sum()))
        # and the sign is local to the finding (no global shift of the whole image)
        assert (diff > 0.04).mean() < 0.5, (finding, index)
        others = [n for n in FINDINGS if n not in (finding, "Lung Opacity")]
        assert all(on.truth[n] == off.truth[n] for n in others)


def test_turning_one_finding_off_leaves_the_others_alone() -> None:
    base = None
    for index in range(40):
        case = generate_case(1, index, SMALL)
        present = [n for n in FINDINGS if case.truth[n] and n != "Lung Opacity"]
        if len(present) >= 2:
            base = case
            break
    assert base is not None
    target = present[0]
    changed = generate_case(1, base.index, SMALL, overrides={target: False})
    assert not changed.truth[target]
    assert all(changed.truth[n] == base.truth[n] for n in present[1:])
    assert changed.nuisance == base.nuisance


def test_labels_are_consistent_with_truth() -> None:
    """1 only for present findings, 0 only for absent ones; Lung Opacity covers its causes."""
    for index in range(400):
        case = describe_case(2, index, SMALL)
        for name in FINDINGS:
            label = case.labels[name]
            if label == 1.0:
                assert case.truth[name], (index, name, case.report)
            if label == 0.0:
                assert not case.truth[name], (index, name, case.report)
        if any(case.truth[n] for n in OPACITY_CAUSES):
            assert case.truth["Lung Opacity"]
        nothing = not any(case.truth[n] for n in FINDINGS if n != "Support Devices")
        if nothing and case.no_finding:
            assert not any(v == 1.0 for n, v in case.labels.items() if n != "Support Devices")


def test_a_normal_case_gets_a_normal_report() -> None:
    normal_words = ("No acute", "Normal chest", "No radiographic evidence")
    plain = 0
    for index in range(30):
        case = describe_case(0, index, SMALL, overrides=_only(None))
        assert not any(case.truth.values())
        assert not any(v == 1.0 for v in case.labels.values())
        if not any(v == -1.0 for v in case.labels.values()):
            plain += 1
            assert case.no_finding
            assert any(s.startswith(normal_words) for s in case.sentences), case.report
    assert plain >= 15


def test_reports_vary_and_hedge() -> None:
    reports, uncertain, blank = set(), 0, 0
    for index in range(200):
        case = describe_case(5, index, SMALL)
        reports.add(case.report)
        uncertain += sum(v == -1.0 for v in case.labels.values())
        blank += sum(math.isnan(v) for v in case.labels.values())
    assert len(reports) == 200
    assert uncertain >= 20 and blank >= 200 * 5
