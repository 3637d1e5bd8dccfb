"""Anchor-set value object and files: hashing, round trip, immutability, versions, lookup."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from anchors_testing import EFFUSION, effusion_set, saved_effusion

from chexretrieve.anchors import (
    AnchorSet,
    AnchorSetError,
    AnchorSource,
    anchors_root,
    content_hash,
    find_anchor_sets,
    format_anchor_set,
    latest_anchor_set,
    latest_variants,
    load_anchor_set,
    resolve_anchor_set,
    save_new_version,
)


def test_content_hash_matches_a_naive_sha256_of_the_canonical_json() -> None:
    pairs = [("positive", "Small effusion."), ("negative", 'No "effusion" ü.')]
    canonical = '[["positive","Small effusion."],["negative","No \\"effusion\\" ü."]]'
    expected = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert content_hash(pairs) == expected


def test_content_hash_depends_on_text_polarity_and_order_but_not_on_sources() -> None:
    base = effusion_set()
    flipped = [(t, "negative" if p == "positive" else "positive") for t, p in EFFUSION]
    assert effusion_set(sentences=flipped).content_hash != base.content_hash
    assert effusion_set(sentences=EFFUSION[::-1]).content_hash != base.content_hash
    edited = [(t + " ", p) for t, p in EFFUSION]
    assert effusion_set(sentences=edited).content_hash != base.content_hash
    other_source = AnchorSet.create(
        sentences=EFFUSION,
        source=AnchorSource(kind="llm", model="m", prompt="p", date="2026-01-01"),
        finding="Pleural Effusion",
        variant="a",
    )
    assert other_source.content_hash == base.content_hash


def test_save_load_round_trip_keeps_everything(tmp_path) -> None:
    anchor_set = effusion_set()
    path = save_new_version(anchor_set, tmp_path)
    assert path == tmp_path / "findings" / "pleural_effusion" / "v1-a.yaml"
    loaded = load_anchor_set(path)
    assert loaded == anchor_set
    assert loaded.path == path
    assert loaded.key == "pleural_effusion.a@1"
    assert loaded.sentences == tuple(t for t, _ in EFFUSION)
    assert loaded.polarities == tuple(p for _, p in EFFUSION)
    # the stored hash is the one written in the file, and the file re-serialises identically
    assert f'content_hash: "{anchor_set.content_hash}"' in path.read_text()
    assert format_anchor_set(loaded) == path.read_text()


def test_json_files_load_like_yaml(tmp_path) -> None:
    anchor_set = effusion_set()
    path = tmp_path / "set.json"
    path.write_text(json.dumps(anchor_set.to_dict(), indent=2))
    assert load_anchor_set(path) == anchor_set


def test_anchor_sets_are_frozen() -> None:
    anchor_set = effusion_set()
    with pytest.raises(dataclasses.FrozenInstanceError):
        anchor_set.version = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        anchor_set.sources["x"] = anchor_set.sources["main"]  # type: ignore[index]


def test_an_object_with_a_wrong_hash_cannot_exist() -> None:
    anchor_set = effusion_set()
    with pytest.raises(AnchorSetError, match="does not match the sentences"):
        dataclasses.replace(anchor_set, content_hash="sha256:" + "0" * 64)


def test_saving_never_overwrites_a_released_version(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    before = path.read_bytes()
    assert save_new_version(effusion_set(), tmp_path) == path  # identical content: a no-op
    changed = effusion_set(sentences=EFFUSION[:-1])
    with pytest.raises(AnchorSetError) as info:
        save_new_version(changed, tmp_path)
    assert str(path) in str(info.value) and "version 2" in str(info.value)
    assert path.read_bytes() == before


def test_revised_makes_the_next_version_and_keeps_sources(tmp_path) -> None:
    first = load_anchor_set(saved_effusion(tmp_path))
    pairs = list(zip(first.sentences, first.polarities, strict=True))
    second = first.revised(sentences=pairs[:-1] + [("Trace left effusion.", "positive")])
    assert (second.version, second.id, first.version) == (2, first.id, 1)
    assert second.entries[0].source == "main"
    assert second.entries[-1].source == "curated"
    assert second.sources["curated"].kind == "curated"
    path = save_new_version(second, tmp_path)
    assert path.name == "v2-a.yaml"
    assert latest_anchor_set("Pleural Effusion", root=tmp_path) == second
    assert resolve_anchor_set("pleural_effusion.a@1", tmp_path) == first
    assert resolve_anchor_set("pleural_effusion.a", tmp_path) == second
    assert resolve_anchor_set(path, tmp_path) == second
    with pytest.raises(AnchorSetError, match="no anchor set 'pleural_effusion.z'"):
        resolve_anchor_set("pleural_effusion.z", tmp_path)


def test_find_and_latest_by_finding_variant_and_context(tmp_path) -> None:
    for variant in ("b", "a"):
        saved_effusion(tmp_path, variant)
    context = AnchorSet.create(
        sentences=[("AP portable view.", "positive"), ("PA view.", "negative")],
        source=AnchorSource(kind="curated"),
        context="nuisance/test-context",
    )
    assert save_new_version(context, tmp_path).name == "test-context-v1.yaml"
    keys = [s.key for s in find_anchor_sets(tmp_path)]
    assert keys == ["pleural_effusion.a@1", "pleural_effusion.b@1", "nuisance.test-context@1"]
    assert [s.variant for s in find_anchor_sets(tmp_path, finding="pleural effusion")] == ["a", "b"]
    assert find_anchor_sets(tmp_path, finding="Cardiomegaly") == []
    assert latest_anchor_set("Pleural Effusion", "b", tmp_path).variant == "b"
    assert latest_anchor_set("Pleural Effusion", root=tmp_path).variant == "a"
    assert [s.variant for s in latest_variants("Pleural Effusion", tmp_path)] == ["a", "b"]
    assert latest_anchor_set("nuisance/test-context", root=tmp_path) == context
    with pytest.raises(AnchorSetError, match="no anchor set for 'Cardiomegaly'"):
        latest_anchor_set("Cardiomegaly", root=tmp_path)
    with pytest.raises(ValueError, match="unknown finding"):
        find_anchor_sets(tmp_path, finding="Broken Heart")


def test_two_files_with_one_key_are_an_error(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    (tmp_path / "copy.yaml").write_bytes(path.read_bytes())
    with pytest.raises(AnchorSetError, match="both hold pleural_effusion.a@1"):
        find_anchor_sets(tmp_path)


def test_anchors_root_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("CHEXRETRIEVE_ANCHORS", raising=False)
    assert anchors_root().name == "anchors" and (anchors_root() / "schema").is_dir()
    monkeypatch.setenv("CHEXRETRIEVE_ANCHORS", str(tmp_path))
    assert anchors_root() == tmp_path.resolve()
    saved_effusion(tmp_path)
    assert [s.key for s in find_anchor_sets()] == ["pleural_effusion.a@1"]
    monkeypatch.setenv("CHEXRETRIEVE_ANCHORS", str(tmp_path / "missing"))
    with pytest.raises(AnchorSetError, match="does not exist"):
        find_anchor_sets()


def test_invalid_objects_are_refused_with_a_reason() -> None:
    with pytest.raises(AnchorSetError, match="exactly one of"):
        AnchorSet.create(sentences=EFFUSION, source=AnchorSource(kind="curated"))
    with pytest.raises(AnchorSetError, match="unknown finding"):
        AnchorSet.create(
            sentences=EFFUSION, source=AnchorSource(kind="curated"), finding="Effusion"
        )
    with pytest.raises(AnchorSetError, match="group/name"):
        AnchorSet.create(sentences=EFFUSION, source=AnchorSource(kind="curated"), context="Broad")
    with pytest.raises(AnchorSetError, match="polarity 'maybe'"):
        AnchorSet.create(
            sentences=[("x", "maybe")], source=AnchorSource(kind="curated"), finding="Edema"
        )
    with pytest.raises(AnchorSetError, match="needs model, prompt and date"):
        AnchorSource(kind="llm", model="m")
