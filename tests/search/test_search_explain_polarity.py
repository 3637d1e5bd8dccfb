"""Explanations say what each anchor sentence says of the finding (its polarity in the set file).

The reference is the anchor-set YAML file read with PyYAML here, not the project's loader.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from test_search_service import D, FakeEncoder, _unit, make_gallery

from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.explain import explain_pair
from chexretrieve.search.service import SearchRequest, SearchService
from chexretrieve.search.sources import StoreAnchorProvider
from chexretrieve.store import open_store

ANCHORS = Path(__file__).resolve().parents[2] / "anchors"


def _file_entries(key: str) -> list[tuple[str, str]]:
    """(text, polarity) of the set ``id@version`` as its YAML file under anchors/ lists them."""
    set_id, version = key.split("@")
    for path in sorted((ANCHORS / "findings").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if data.get("id") == set_id and str(data.get("version")) == version:
            return [(entry["text"], entry["polarity"]) for entry in data["sentences"]]
    raise AssertionError(f"no file for {key}")


def test_explain_pair_carries_each_sentences_polarity():
    rng = np.random.default_rng(2)
    anchors = _unit(rng.standard_normal((9, D)))
    q, k = _unit(rng.standard_normal((2, D)))
    sentences = [f"sentence {i}" for i in range(9)]
    polarities = ["positive" if i % 3 else "negative" for i in range(9)]
    exp = explain_pair(q, k, anchors, sentences, 10.0, top=4, polarities=polarities)
    for term in exp.shared + exp.differing:
        assert term.polarity == polarities[sentences.index(term.sentence)]
    assert all(t.polarity is None for t in explain_pair(q, k, anchors, sentences, 10.0).shared)
    with pytest.raises(ValueError, match="8 polarities for 9 anchor sentences"):
        explain_pair(q, k, anchors, sentences, 10.0, polarities=polarities[:8])


def test_the_store_provider_gives_the_files_polarities(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    provider = StoreAnchorProvider(store, StandInEncoder(dim=16))
    ref = provider.anchor_set("Pleural Effusion", None)
    assert list(zip(ref.sentences, ref.polarities, strict=True)) == _file_entries(ref.key)
    assert {"positive", "negative"} <= set(ref.polarities)


def test_search_explanations_name_the_polarity_of_their_sentences(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    gallery = make_gallery()
    encoder = FakeEncoder(np.random.default_rng(0))
    texts = StandInEncoder(dim=D)  # any fixed text tower of the gallery's width
    encoder.embed_texts = texts.embed_texts
    provider = StoreAnchorProvider(store, encoder)
    service = SearchService(
        lambda: gallery,
        provider,
        encoder=encoder,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )
    request = SearchRequest(finding="Pleural Effusion", geometry="softmax", case_id=101)
    expected = dict(_file_entries(provider.anchor_set("Pleural Effusion", None).key))
    explanation = service.explain(request, 150)
    for term in explanation.shared + explanation.differing:
        assert term.polarity == expected[term.sentence]
    text = explanation.as_text()
    assert "[present]" in text or "[absent]" in text
