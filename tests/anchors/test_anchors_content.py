"""The shipped anchor sets: 13 findings x >= 5 variants, the broad corpus, nuisance and natural."""

from __future__ import annotations

import itertools
import re

import pytest

from chexretrieve.anchors import (
    anchors_root,
    find_anchor_sets,
    latest_anchor_set,
    latest_variants,
    natural_image_anchor_set,
    natural_image_anchors,
    validate_anchor_file,
)
from chexretrieve.anchors.broad_corpus import build_broad_corpus, build_broad_sentences
from chexretrieve.anchors.files import anchor_files
from chexretrieve.anchors.natural import read_name_list
from chexretrieve.anchors.topics import on_topic_fraction
from chexretrieve.findings import FINDINGS


@pytest.fixture(autouse=True)
def _repo_anchors(monkeypatch):
    monkeypatch.delenv("CHEXRETRIEVE_ANCHORS", raising=False)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().rstrip(".").casefold()


def test_every_shipped_file_validates_without_errors_or_warnings() -> None:
    files = anchor_files()
    assert len(files) >= 13 * 5 + 2
    problems = [str(p) for path in files for p in validate_anchor_file(path).problems]
    assert problems == []


@pytest.mark.parametrize("finding", FINDINGS)
def test_each_finding_has_five_independent_balanced_on_topic_variants(finding) -> None:
    variants = latest_variants(finding)
    assert len(variants) >= 5
    assert len({v.variant for v in variants}) == len(variants)
    for anchor_set in variants:
        n = len(anchor_set)
        positives = anchor_set.polarities.count("positive")
        assert 40 <= n <= 60, anchor_set.key
        assert 0.5 <= positives / n <= 0.7, anchor_set.key
        assert on_topic_fraction(list(anchor_set.sentences), finding) >= 0.85, anchor_set.key
        assert all(src.kind in ("llm", "curated") for src in anchor_set.sources.values())
    # independent wording: no two variants share more than a tenth of their sentences
    for a, b in itertools.combinations(variants, 2):
        shared = {_norm(t) for t in a.sentences} & {_norm(t) for t in b.sentences}
        assert len(shared) <= 0.1 * len(a), (a.key, b.key, sorted(shared))


def test_authored_sets_record_an_honest_llm_source() -> None:
    anchor_set = latest_anchor_set("Pleural Effusion", "a")
    [source] = anchor_set.sources.values()
    assert source.kind == "llm" and source.model == "claude (project authoring session)"
    assert source.date == "2026-11-29" and "Pleural Effusion" in source.prompt
    assert "LLM-assisted" in source.note


def test_broad_corpus_is_large_unique_varied_and_reproducible() -> None:
    corpus = latest_anchor_set("broad/clinical")
    assert len(corpus) >= 2000
    assert len({_norm(t) for t in corpus.sentences}) == len(corpus)
    categories = {e.source for e in corpus.entries}
    assert categories == {"chest", "devices", "abdomen", "neuro", "msk", "history"}
    assert corpus.polarities.count("negative") >= 400
    # the seeded script rebuilds the released file exactly
    assert build_broad_corpus() == corpus
    # another seed draws other combinations
    other = build_broad_sentences(seed=1)
    assert {t for t, _, _ in other} != set(corpus.sentences)
    assert all((t[0].isupper() or t[0].isdigit()) and t.endswith(".") for t in corpus.sentences)
    assert not any(re.search(r"\b[Aa] [aeiou]", t) for t in corpus.sentences)


def test_nuisance_set_describes_technique_not_findings() -> None:
    nuisance = latest_anchor_set("nuisance/projection-habitus")
    assert 40 <= len(nuisance) <= 60
    text = " ".join(nuisance.sentences).lower()
    for word in ("portable", "rotat", "inspiration", "habitus", "exposed", "pa "):
        assert word in text, word
    assert {"positive", "negative"} == set(nuisance.polarities)


def test_natural_image_name_lists_and_templates() -> None:
    folder = anchors_root() / "natural"
    classes = read_name_list(folder / "imagenet_r_classes.txt")
    styles = read_name_list(folder / "styles.txt")
    assert len(classes) == 200 and len({c.lower() for c in classes}) == 200
    assert styles[:3] == ["art", "cartoon", "deviantart"] and len(styles) == 15
    classes_set = natural_image_anchor_set("imagenet-r-classes")
    assert classes_set.sentences[0] == "a photo of a goldfish"
    assert classes_set.key == "natural.imagenet-r-classes@1" and len(classes_set) == 200
    styles_set = natural_image_anchor_set("imagenet-r-styles")
    assert styles_set.sentences[1] == "a cartoon rendition of an object"


def test_natural_image_anchors_checks_its_input() -> None:
    assert natural_image_anchors([" tabby  cat", "pug"], "a photo of a {}") == [
        "a photo of a tabby cat",
        "a photo of a pug",
    ]
    with pytest.raises(ValueError, match="exactly one"):
        natural_image_anchors(["pug"], "a photo of a {} {}")
    with pytest.raises(ValueError, match="appears twice"):
        natural_image_anchors(["pug", "Pug"], "a {}")
    with pytest.raises(ValueError, match="empty name"):
        natural_image_anchors(["pug", " "], "a {}")
    with pytest.raises(ValueError, match="is empty"):
        natural_image_anchors([], "a {}")


def test_the_whole_folder_loads_with_unique_keys() -> None:
    sets = find_anchor_sets()
    assert len({s.key for s in sets}) == len(sets)
    assert {s.finding for s in sets if s.finding} == set(FINDINGS)
