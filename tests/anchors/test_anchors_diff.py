"""diff_anchor_sets: added, removed, reworded and polarity-flipped sentences, and its rendering."""

from __future__ import annotations

from anchors_testing import EFFUSION, effusion_set
from rich.console import Console

from chexretrieve.anchors import diff_anchor_sets
from chexretrieve.anchors.diff import render_diff


def _edited():
    pairs = list(EFFUSION)
    pairs[0] = ("Small left pleural effusion, slightly increased.", "positive")  # reworded
    pairs[4] = ("No pleural effusion.", "positive")  # polarity flip (deliberately wrong)
    del pairs[3]  # removed
    pairs.append(("Loculated effusion along the right lateral chest wall.", "positive"))  # added
    return effusion_set(sentences=pairs).revised(description="edited")


def test_identical_sets_have_an_empty_diff() -> None:
    diff = diff_anchor_sets(effusion_set(), effusion_set())
    assert diff.same_content and not diff.reordered and diff.unchanged == len(EFFUSION)
    assert diff.summary().endswith(
        "0 added, 0 removed, 0 reworded, 0 polarity changes, 6 unchanged"
    )


def test_every_kind_of_change_is_reported_once() -> None:
    old, new = effusion_set(), _edited()
    diff = diff_anchor_sets(old, new)
    assert diff.old_key == "pleural_effusion.a@1" and diff.new_key == "pleural_effusion.a@2"
    assert diff.added == (("Loculated effusion along the right lateral chest wall.", "positive"),)
    assert diff.removed == (("Large bilateral pleural effusions.", "positive"),)
    [change] = diff.changed
    assert change.old_text == "Small left pleural effusion."
    assert change.new_text == "Small left pleural effusion, slightly increased."
    assert 0.6 <= change.similarity < 1.0
    assert diff.polarity_flipped == (("No pleural effusion.", "negative", "positive"),)
    assert diff.unchanged == 3
    assert diff.metadata == (("description", "test set", "edited"),)
    assert not diff.same_content
    # each sentence of either set is accounted for exactly once
    accounted_old = len(diff.removed) + len(diff.changed) + len(diff.polarity_flipped) + 3
    accounted_new = len(diff.added) + len(diff.changed) + len(diff.polarity_flipped) + 3
    assert (accounted_old, accounted_new) == (len(old), len(new))


def test_reordering_alone_is_not_a_content_change() -> None:
    diff = diff_anchor_sets(effusion_set(), effusion_set(sentences=EFFUSION[::-1]))
    assert diff.same_content and diff.reordered
    assert diff.summary().endswith("6 unchanged, order changed")


def test_dissimilar_replacements_are_added_and_removed_not_reworded() -> None:
    pairs = list(EFFUSION)
    pairs[2] = ("Meniscus sign at the right base.", "positive")
    diff = diff_anchor_sets(effusion_set(), effusion_set(sentences=pairs))
    assert diff.changed == ()
    assert diff.added == (("Meniscus sign at the right base.", "positive"),)
    assert diff.removed == (("Blunting of the right costophrenic angle.", "positive"),)


def test_render_shows_word_level_changes_and_polarity() -> None:
    console = Console(record=True, width=160, color_system=None)
    render_diff(diff_anchor_sets(effusion_set(), _edited()), console)
    text = console.export_text()
    for needle in (
        "1 added, 1 removed, 1 reworded, 1 polarity changes, 3 unchanged",
        "description: test set -> edited",
        "Loculated effusion along the right lateral chest wall.",
        "Large bilateral pleural effusions.",
        "slightly increased.",
        "polarity changes",
    ):
        assert needle in text, needle


def test_to_dict_is_json_ready() -> None:
    import json

    data = json.loads(json.dumps(diff_anchor_sets(effusion_set(), _edited()).to_dict()))
    assert data["polarity_flipped"] == [
        {"text": "No pleural effusion.", "old": "negative", "new": "positive"}
    ]
    assert data["changed"][0]["new_text"].endswith("slightly increased.")
