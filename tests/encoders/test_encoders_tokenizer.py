"""CLIP's BPE tokenizer: agrees with transformers' CLIPTokenizer and across both file formats."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from encoder_builders import TINY_MERGES, TINY_VOCAB_SIZE, byte_symbol_list, tiny_vocab

from chexretrieve.encoders.base import EncoderError
from chexretrieve.encoders.tokenizer import byte_symbols, clean_text, load_clip_tokenizer

SENTENCES = [
    "the effusion",
    "No pleural effusion.",
    "THE   heart  is\tnormal in size; there's no pneumothorax!",
    "12 ribs, 3rd-4th lines... (left) & right?",
    "café résumé: élan",
    "",
    "theeffthe theeff",
]


def test_byte_symbols_are_the_clip_table() -> None:
    symbols = byte_symbols()
    assert list(symbols) == byte_symbol_list()
    assert len(set(symbols)) == 256
    assert symbols[ord("a")] == "a" and symbols[ord(" ")] == chr(256 + 32)


def test_matches_transformers_clip_tokenizer(tokenizer_folder) -> None:
    from transformers import CLIPTokenizer

    reference = CLIPTokenizer.from_pretrained(tokenizer_folder, local_files_only=True)
    ours = load_clip_tokenizer(tokenizer_folder)
    for sentence in SENTENCES:
        ids, ends = ours.encode_batch([sentence], max_tokens=77)
        assert ids[0].tolist() == reference(sentence)["input_ids"], sentence
        assert ends[0] == ids.shape[1] - 1


def test_merges_are_applied(tokenizer_folder) -> None:
    tokenizer = load_clip_tokenizer(tokenizer_folder)
    vocab = {token: i for i, token in enumerate(tiny_vocab())}
    assert tokenizer.encode("The") == [vocab["the</w>"]]
    # "effusion": 'eff' merged, then single letters, 'ion</w>' merged from 'i' + 'on</w>'
    assert tokenizer.encode("effusion") == [vocab[t] for t in ["eff", "u", "s", "ion</w>"]]
    assert tokenizer.encode("no") == [vocab["no</w>"]]


def test_openai_gz_and_huggingface_folder_agree(tokenizer_folder, tokenizer_gz) -> None:
    from_folder = load_clip_tokenizer(tokenizer_folder)
    from_gz = load_clip_tokenizer(tokenizer_gz)
    assert from_gz.vocab == from_folder.vocab
    assert from_gz.vocab_size == TINY_VOCAB_SIZE
    assert (from_gz.start_id, from_gz.end_id) == (TINY_VOCAB_SIZE - 2, TINY_VOCAB_SIZE - 1)
    for sentence in SENTENCES:
        assert from_gz.encode(sentence) == from_folder.encode(sentence)


def test_openai_gz_keeps_only_openais_merge_count(tmp_path) -> None:
    from chexretrieve.encoders import tokenizer as module

    path = tmp_path / "many.txt.gz"
    merges = [f"{a} {b}" for a, b in TINY_MERGES]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(["#version: 0.2", *merges, *merges[:3]]) + "\n")
    original = module.OPENAI_MERGE_COUNT
    module.OPENAI_MERGE_COUNT = len(TINY_MERGES)
    try:
        tokenizer = load_clip_tokenizer(path)
    finally:
        module.OPENAI_MERGE_COUNT = original
    assert tokenizer.vocab_size == TINY_VOCAB_SIZE
    assert original == 49408 - 514


def test_text_cleaning_unescapes_html_and_whitespace(tokenizer_folder) -> None:
    tokenizer = load_clip_tokenizer(tokenizer_folder)
    assert clean_text("  A &amp;amp; B\n\n C  ") == "a & b c"
    assert tokenizer.encode("left &amp; right") == tokenizer.encode("left & right")


def test_batches_pad_with_zero_and_cut_long_sentences(tokenizer_folder) -> None:
    tokenizer = load_clip_tokenizer(tokenizer_folder)
    ids, ends = tokenizer.encode_batch(["the", "x " * 100], max_tokens=10)
    assert ids.shape == (2, 10) and ids.dtype == np.int64
    assert ids[0, :3].tolist() == [tokenizer.start_id, tokenizer.encode("the")[0], tokenizer.end_id]
    assert (ids[0, 3:] == 0).all()
    assert ids[1, -1] == tokenizer.end_id and ids[1, 0] == tokenizer.start_id
    assert ends.tolist() == [2, 9]


def test_missing_tokenizer_says_what_to_pass(tmp_path) -> None:
    with pytest.raises(EncoderError, match="tokenizer_path .*bpe_simple_vocab_16e6.txt.gz"):
        load_clip_tokenizer(None)
    with pytest.raises(EncoderError, match="does not exist"):
        load_clip_tokenizer(tmp_path / "nowhere.txt.gz")
    with pytest.raises(EncoderError, match="has no vocab.json"):
        load_clip_tokenizer(tmp_path)


def test_bad_tokenizer_files_are_named(tmp_path, tokenizer_folder) -> None:
    not_gzip = tmp_path / "plain.txt.gz"
    not_gzip.write_text("a b\n")
    with pytest.raises(EncoderError, match="plain.txt.gz: cannot read it as a gzip"):
        load_clip_tokenizer(not_gzip)

    folder = tmp_path / "broken"
    folder.mkdir()
    vocab = json.loads((tokenizer_folder / "vocab.json").read_text())
    del vocab["<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\nt h\n")
    with pytest.raises(EncoderError, match=r"broken: the vocabulary has no <\|endoftext\|>"):
        load_clip_tokenizer(folder)

    vocab["<|endoftext|>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\nt h\nq z</w>\n")  # no "qz</w>" token
    with pytest.raises(EncoderError, match="'qz</w>' is not in the vocabulary"):
        load_clip_tokenizer(folder).encode("qz")

    (folder / "merges.txt").write_text("#version: 0.2\nt h x\n")
    with pytest.raises(EncoderError, match="line 2 is not a merge"):
        load_clip_tokenizer(folder)


def test_fingerprint_follows_the_vocabulary_not_the_file_format(
    tokenizer_folder, tokenizer_gz, tmp_path
) -> None:
    from_folder = load_clip_tokenizer(tokenizer_folder)
    from_gz = load_clip_tokenizer(tokenizer_gz)
    assert from_gz.fingerprint == from_folder.fingerprint  # same ids from both formats
    assert len(from_gz.fingerprint) == 64 and from_gz.fingerprint == from_gz.fingerprint
    # the same merges in another order give other ids for some words, so another fingerprint
    swapped = tmp_path / "swapped.txt.gz"
    merges = [f"{a} {b}" for a, b in TINY_MERGES]
    merges[0], merges[2] = merges[2], merges[0]
    with gzip.open(swapped, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(["#version: 0.2", *merges]) + "\n")
    assert load_clip_tokenizer(swapped).fingerprint != from_gz.fingerprint
