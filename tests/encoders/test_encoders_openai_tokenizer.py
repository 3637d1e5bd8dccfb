"""Our CLIP tokenizer with OpenAI's real vocabulary is token for token open_clip's (= CheXzero's).

The reference is ``open_clip.tokenizer`` (a copy of OpenAI CLIP's ``simple_tokenizer.py``, the file
CheXzero ships too), with the ``bpe_simple_vocab_16e6.txt.gz`` that open_clip_torch ships: the
same file the README tells users to pass. open_clip's package ``__init__`` imports torchvision,
which this project does not install, so the module file is loaded on its own (it needs only
ftfy, regex, numpy and torch). ``make setup`` installs open_clip_torch with ``--no-deps``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from encoder_builders import VARIED_SENTENCES as SENTENCES

from chexretrieve.encoders.tokenizer import bytes_to_unicode, load_clip_tokenizer

CONTEXT = 77


@pytest.fixture(scope="module")
def reference():
    """open_clip's tokenizer module and its bundled OpenAI vocabulary path."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        pytest.fail("the reference is missing: make setup (pip install --no-deps open_clip_torch)")
    folder = Path(spec.submodule_search_locations[0])
    module_spec = importlib.util.spec_from_file_location(
        "open_clip_tokenizer_reference", folder / "tokenizer.py"
    )
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module, folder / "bpe_simple_vocab_16e6.txt.gz"


@pytest.fixture(scope="module")
def ours(reference):
    return load_clip_tokenizer(reference[1])


def _published_bytes_to_unicode() -> dict[int, str]:
    """OpenAI CLIP's ``bytes_to_unicode`` as published (simple_tokenizer.py), written out here."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs], strict=True))


def _padded(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids, ends = tokenizer.encode_batch(texts, CONTEXT)
    out = np.zeros((len(texts), CONTEXT), dtype=np.int64)
    out[:, : ids.shape[1]] = ids
    return out, ends


def test_byte_table_follows_the_published_algorithm_in_order() -> None:
    published = _published_bytes_to_unicode()
    assert list(bytes_to_unicode().items()) == list(published.items())  # order included


def test_real_vocabulary_ids(ours) -> None:
    assert ours.vocab_size == 49408
    assert (ours.vocab["!"], ours.vocab["a"], ours.vocab[".</w>"]) == (0, 64, 269)
    assert (ours.start_id, ours.end_id) == (49406, 49407)
    published = list(_published_bytes_to_unicode().values())
    assert [ours.vocab[s] for s in published] == list(range(256))
    assert [ours.vocab[s + "</w>"] for s in published] == list(range(256, 512))


def test_ids_equal_open_clip_for_varied_clinical_sentences(reference, ours) -> None:
    module, vocab_path = reference
    simple = module.SimpleTokenizer(str(vocab_path))
    assert len(SENTENCES) >= 50
    expected = module.tokenize(SENTENCES, context_length=CONTEXT).numpy()
    ids, ends = _padded(ours, SENTENCES)
    for i, sentence in enumerate(SENTENCES):
        assert ids[i].tolist() == expected[i].tolist(), repr(sentence)
        assert ours.encode(sentence) == simple.encode(sentence), repr(sentence)
    # the text tower pools where CLIP does: argmax of the ids (the first end token)
    assert ends.tolist() == expected.argmax(axis=1).tolist()
    # the long ones were cut to 77 with the end token last, as CheXzero's training code does
    long_rows = [i for i, s in enumerate(SENTENCES) if len(simple.encode(s)) > CONTEXT - 2]
    assert len(long_rows) >= 3
    assert all(ids[i, -1] == 49407 and ends[i] == CONTEXT - 1 for i in long_rows)


def test_a_literal_end_token_in_the_text_is_pooled_at_first(reference, ours) -> None:
    # OpenAI's (and CheXzero's) pattern keeps a literal <|endoftext|> as the special token
    # (open_clip renamed its special tokens, so the expectation is built from the two halves)
    module, vocab_path = reference
    simple = module.SimpleTokenizer(str(vocab_path))
    before, after = "left effusion", "right effusion"
    ids, ends = _padded(ours, [f"{before} <|endoftext|> {after}"])
    expected = [49406, *simple.encode(before), 49407, *simple.encode(after), 49407]
    assert ids[0, : len(expected)].tolist() == expected
    assert ends[0] == len(simple.encode(before)) + 1 == int(ids[0].argmax())
