"""`anchors embed`, `search` and the UI (`serve`) with a CheXzero checkpoint and its tokenizer.

The tokenizer travels in the encoder spec (``chexzero:CKPT?tokenizer=BPE``), in
``$CHEXRETRIEVE_TOKENIZER`` or beside the checkpoint, so every entry point embeds the anchor
sentences with the same text tower. Tiny random checkpoint and tokenizer (tests/encoders).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from chexretrieve.anchors.curation import embed_anchor_set
from chexretrieve.anchors.files import resolve_anchor_set
from chexretrieve.cli import app
from chexretrieve.encoders import load_encoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

ANCHOR_SET = "pleural_effusion.a@1"


@pytest.fixture(scope="module")
def archive(tmp_path_factory, chexzero_checkpoint, tokenizer_gz):
    """(store URL, spec): 8 PNGs ingested with the tiny CheXzero checkpoint."""
    root = tmp_path_factory.mktemp("chexzero-archive")
    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray((rng.random((60, 50)) * 255).astype(np.uint8)).save(root / f"c{i}.png")
    spec = f"chexzero:{chexzero_checkpoint}?tokenizer={tokenizer_gz}"
    url = f"sqlite:///{root / 'store.sqlite'}"
    store = open_store(url)
    ingest_paths([root], store, load_encoder(spec, "cpu"), IngestConfig(workers=0))
    store.close()
    return url, spec


@pytest.fixture(autouse=True)
def _environment(tmp_path, monkeypatch):
    monkeypatch.delenv("CHEXRETRIEVE_TOKENIZER", raising=False)
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _search(url: str, spec: str) -> list[int]:
    result = CliRunner().invoke(
        app,
        ["search", "--db", url, "--encoder", spec, "--case", "2", "--finding",
         "Pleural Effusion", "--anchor-set", ANCHOR_SET, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return [hit["case"] for hit in json.loads(result.stdout)["hits"]]


def test_anchors_embed_then_search_with_the_tokenizer_in_the_spec(archive) -> None:
    url, spec = archive
    result = CliRunner().invoke(
        app, ["anchors", "embed", ANCHOR_SET, "--encoder", spec, "--db", url], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    assert "stored" in result.output or "hit" in result.output
    # what was cached is this encoder's text tower on the set's sentences
    encoder = load_encoder(spec, "cpu")
    anchor_set = resolve_anchor_set(ANCHOR_SET)
    store = open_store(url)
    try:
        cached = embed_anchor_set(anchor_set, encoder, store)
    finally:
        store.close()
    assert cached.cached
    expected = encoder.embed_texts(list(anchor_set.sentences))
    np.testing.assert_allclose(cached.matrix, expected, atol=1e-6)

    hits = _search(url, spec)
    assert hits and 2 not in hits


def test_search_finds_the_tokenizer_in_the_environment_or_beside_the_checkpoint(
    archive, chexzero_checkpoint, tokenizer_gz, tmp_path, monkeypatch
) -> None:
    url, spec = archive
    expected = _search(url, spec)
    monkeypatch.setenv("CHEXRETRIEVE_TOKENIZER", str(tokenizer_gz))
    assert _search(url, f"chexzero:{chexzero_checkpoint}") == expected
    monkeypatch.delenv("CHEXRETRIEVE_TOKENIZER")
    folder = tmp_path / "weights"
    folder.mkdir()
    shutil.copy(chexzero_checkpoint, folder / "best_64_5e-05_original_22000_0.864.pt")
    shutil.copy(tokenizer_gz, folder / "bpe_simple_vocab_16e6.txt.gz")
    assert _search(url, f"chexzero:{folder / 'best_64_5e-05_original_22000_0.864.pt'}") == expected


def test_search_without_any_tokenizer_says_how_to_give_one(archive, chexzero_checkpoint) -> None:
    url, _ = archive
    result = CliRunner().invoke(
        app,
        ["search", "--db", url, "--encoder", f"chexzero:{chexzero_checkpoint}", "--case", "2",
         "--finding", "Pleural Effusion", "--anchor-set", "pleural_effusion.b@1"],  # not cached
        terminal_width=400,
    )  # fmt: skip
    assert result.exit_code == 2
    assert "?tokenizer=PATH" in "".join(result.output.split())  # rich may wrap anywhere
    assert "Traceback" not in result.output


def test_the_ui_case_lookup_searches_with_the_spec(archive, tmp_path) -> None:
    from chexretrieve.search.service import SearchRequest
    from chexretrieve.ui.app import open_case_lookup
    from chexretrieve.ui.config import UIConfig

    url, spec = archive
    lookup, _ = open_case_lookup(
        UIConfig(db_url=url, encoder=spec, feature_cache_dir=tmp_path / "features")
    )
    result = lookup.service.search(
        SearchRequest(finding="Pleural Effusion", case_id=2, anchor_set=ANCHOR_SET), user="dr.ui"
    )
    assert [hit.image_id for hit in result.hits] == _search(url, spec)


def test_cached_anchor_vectors_follow_the_tokenizer(
    tmp_path, chexzero_checkpoint, tokenizer_gz
) -> None:
    """Same weights, another vocabulary: the store's cached anchor vectors are not handed back."""
    import gzip

    from encoder_builders import TINY_MERGES

    other = tmp_path / "fewer_merges.txt.gz"
    with gzip.open(other, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(["#version: 0.2", *(f"{a} {b}" for a, b in TINY_MERGES[:4])]))
    first = load_encoder(f"chexzero:{chexzero_checkpoint}?tokenizer={tokenizer_gz}", "cpu")
    second = load_encoder(f"chexzero:{chexzero_checkpoint}?tokenizer={other}", "cpu")
    assert first.encoder_id == second.encoder_id  # the image side is the same model
    anchor_set = resolve_anchor_set(ANCHOR_SET)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    try:
        assert not embed_anchor_set(anchor_set, first, store).cached
        assert embed_anchor_set(anchor_set, first, store).cached
        fresh = embed_anchor_set(anchor_set, second, store)
        assert not fresh.cached
        expected = second.embed_texts(list(anchor_set.sentences))
        np.testing.assert_allclose(fresh.matrix, expected, atol=1e-6)
        assert not np.allclose(fresh.matrix, first.embed_texts(list(anchor_set.sentences)))
        assert embed_anchor_set(anchor_set, second, store).cached
    finally:
        store.close()
