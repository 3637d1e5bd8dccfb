"""Curation with drafts: draft -> impact with an interval against the version it was edited from
-> publish (curator role) -> revert; off-topic and one-polarity edits are not published
(issue 24, defect 3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from ui_fakes import make_service

from chexretrieve.anchors import latest_anchor_set
from chexretrieve.anchors.config import ImpactConfig
from chexretrieve.anchors.curation import bootstrap_interval
from chexretrieve.ui.curation import DraftDesk, set_as_text

REPO_ANCHORS = Path(__file__).resolve().parents[2] / "anchors"
FINDING = "Pleural Effusion"


@pytest.fixture
def anchors_dir(tmp_path):
    root = tmp_path / "anchors"
    shutil.copytree(
        REPO_ANCHORS / "findings" / "pleural_effusion", root / "findings" / "pleural_effusion"
    )
    return root


def test_the_bootstrap_interval_matches_a_naive_resampling() -> None:
    diffs = np.random.default_rng(5).normal(0.01, 0.05, size=43)
    config = ImpactConfig(bootstrap=500, bootstrap_seed=3)
    rng = np.random.default_rng(3)
    naive = []
    for _ in range(500):  # the same draws, one resample at a time
        naive.append(diffs[rng.integers(0, 43, size=43)].mean())
    low, high = bootstrap_interval(diffs, config)
    assert low == pytest.approx(np.percentile(naive, 2.5))
    assert high == pytest.approx(np.percentile(naive, 97.5))
    assert low < diffs.mean() < high
    assert np.isnan(bootstrap_interval(diffs, ImpactConfig(bootstrap=0))[0])


def test_a_draft_is_not_published_and_is_measured_against_its_base(anchors_dir, tmp_path):
    service = make_service(tmp_path)
    desk = DraftDesk(anchors_dir, None, service.encoder, lambda: service.gallery)
    latest = latest_anchor_set(FINDING, root=anchors_dir).key
    base = desk.get("pleural_effusion.a@1")
    kept = "\n".join(set_as_text(base).splitlines()[::2])
    draft, problems = desk.save_draft(base.key, kept, "every other sentence", "curator")
    assert draft.base == "pleural_effusion.a@1" and not problems
    assert latest_anchor_set(FINDING, root=anchors_dir).key == latest  # nothing published
    assert desk.draft_of(base.key).sentences == draft.sentences
    assert not list((anchors_dir / "findings").rglob("v2-a.yaml"))
    impact = desk.draft_impact(base.key, kept)
    assert "**Impact of pleural_effusion.a@1 → the edit of pleural_effusion.a@1**" in impact
    row = next(line for line in impact.splitlines() if line.startswith("| 95 % interval"))
    low, high = (float(v.replace("−", "-")) for v in row.split("|")[2].split(" to "))
    change = next(line for line in impact.splitlines() if line.startswith("| change"))
    delta = float(change.split("|")[2].strip().replace("−", "-"))
    assert low <= delta <= high


def test_publish_refuses_one_polarity_off_topic_and_non_curators(anchors_dir, monkeypatch):
    desk = DraftDesk(anchors_dir)
    base = desk.get("pleural_effusion.a@1")
    text = set_as_text(base)
    positives = "\n".join(line for line in text.splitlines() if line.startswith("+"))
    _, problems = desk.save_draft(base.key, positives, "", "curator")
    assert any("every sentence is positive" in p for p in problems)
    with pytest.raises(ValueError, match="every sentence is positive"):
        desk.publish(base.key, positives, "", "curator")
    pizza = text + "\n+ The patient likes pizza."
    with pytest.raises(ValueError, match="do not speak of Pleural Effusion.*pizza"):
        desk.publish(base.key, pizza, "", "curator")
    import chexretrieve.ui.roles as roles

    monkeypatch.setattr(roles, "may_publish", lambda user: user == "curator")
    edit = text + "\n+ Small layering left pleural effusion."
    with pytest.raises(ValueError, match="reader may not publish"):
        desk.publish(base.key, edit, "", "reader")
    saved = desk.publish(base.key, edit, "one more", "curator")
    assert (
        saved.key == "pleural_effusion.a@2" and "edited from pleural_effusion.a@1" in saved.summary
    )
    assert latest_anchor_set(FINDING, root=anchors_dir).key == "pleural_effusion.a@2"
    assert desk.draft_of(base.key) is None  # the draft is gone once published


def test_revert_publishes_an_older_version_again(anchors_dir):
    desk = DraftDesk(anchors_dir)
    base = desk.get("pleural_effusion.a@1")
    desk.publish(base.key, set_as_text(base) + "\n- No effusion on the right.", "", "curator")
    with pytest.raises(ValueError, match="latest version already"):
        desk.revert("pleural_effusion.a@2", "curator")
    back = desk.revert("pleural_effusion.a@1", "curator")
    assert back.key == "pleural_effusion.a@3"
    restored = desk.get("pleural_effusion.a@3")
    assert restored.sentences == base.sentences and restored.description == (
        "revert to pleural_effusion.a@1"
    )
    assert latest_anchor_set(FINDING, root=anchors_dir).key == "pleural_effusion.a@3"
