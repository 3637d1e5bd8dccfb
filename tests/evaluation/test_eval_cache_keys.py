"""Every input of the evaluation's embedding caches: changing any one of them is a cache miss (the
embeddings are computed again), and an unchanged run is a hit (issue 32: the density cache once
kept serving embeddings of phantoms drawn before the L/R-marker fix)."""

from __future__ import annotations

import numpy as np
import pytest

import chexretrieve.encoders as encoders
import chexretrieve.evaluation.cache_keys as cache_keys
from chexretrieve.evaluation.config import PhantomSourceConfig
from chexretrieve.evaluation.sources import AnchorTexts, EmbeddingCache, embed_texts_cached


class Counting:
    """A stand-in encoder counting the images and sentences it embeds."""

    images = 0
    sentences = 0

    def __init__(self, encoder_id="stand-in:1", device="cpu", autocast=True, backbone="b1"):
        from types import SimpleNamespace

        self.encoder_id, self.inv_temperature = encoder_id, 20.0
        self.device = SimpleNamespace(type=device)
        self.config = SimpleNamespace(use_autocast=autocast)
        self.text_backbone = backbone

    def embed_images(self, images):
        Counting.images += len(images)
        x = np.stack([np.resize(im[::40, ::40].ravel(), 8) for im in images]) + 1e-3
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def embed_texts(self, texts):
        Counting.sentences += len(texts)
        x = np.stack([np.resize(np.frombuffer(t.encode() * 8, np.uint8)[:8], 8) for t in texts])
        return (x + 1.0) / np.linalg.norm(x + 1.0, axis=1, keepdims=True)


TEXTS = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})


@pytest.fixture(autouse=True)
def _no_probe_counted(monkeypatch):
    """The behavioural probes (two images or sentences embedded on every call, part of the keys
    too: tests/evaluation/test_cache_keys.py) left out of the counts this module makes."""
    monkeypatch.setattr(cache_keys, "image_probe", lambda encoder: "probe")
    monkeypatch.setattr(cache_keys, "text_probe", lambda encoder: "probe")


def _source(tmp_path, monkeypatch, encoder=None, **world):
    from chexretrieve.evaluation.phantom_source import phantom_source

    encoder = encoder or Counting()
    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: encoder)
    config = PhantomSourceConfig(cache_dir=str(tmp_path), workers=1, **{"n_images": 4, **world})
    before = Counting.images
    phantom_source(config, TEXTS, show_progress=False)
    return Counting.images - before  # images embedded: 0 on a cache hit


def _fingerprint_changed(monkeypatch, modules):
    """Pretend the code of ``modules`` changed (its combined fingerprint differs)."""
    original = cache_keys.combined_fingerprint

    def changed(entries, *args, **kwargs):
        value = original(entries, *args, **kwargs)
        return value + "-edited" if tuple(entries) == tuple(modules) else value

    monkeypatch.setattr(cache_keys, "combined_fingerprint", changed)


CHANGES = {
    "world seed": lambda mp: {"seed": 3},
    "world size": lambda mp: {"n_images": 5},
    "validation labels": lambda mp: {"validation_labels": "reported"},
    "RENDER_VERSION": lambda mp: mp.setattr("chexretrieve.phantom.config.RENDER_VERSION", 1),
    "generator settings": lambda mp: mp.setattr(
        "chexretrieve.phantom.PhantomConfig.__repr__", lambda self: "PhantomConfig(other)"
    ),
    "generator code": lambda mp: _fingerprint_changed(mp, cache_keys.GENERATOR_MODULES),
    "label code": lambda mp: _fingerprint_changed(mp, cache_keys._LABEL_CODE),
    "encoder weights": lambda mp: {"encoder": Counting(encoder_id="stand-in:2")},
    "encoder device": lambda mp: {"encoder": Counting(device="cuda")},
    "encoder autocast": lambda mp: {"encoder": Counting(autocast=False)},
    "torch version": lambda mp: mp.setattr("torch.__version__", "0.0.0-test"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_each_input_of_the_phantom_embedding_key_is_a_miss(change, tmp_path, monkeypatch):
    import torch  # noqa: F401  (the key reads its version)

    assert _source(tmp_path, monkeypatch) == 4  # first run: computed
    assert _source(tmp_path, monkeypatch) == 0  # same inputs: a hit
    with monkeypatch.context() as patch:
        world = CHANGES[change](patch) or {}
        encoder = world.pop("encoder", None)
        n = world.get("n_images", 4)
        assert _source(tmp_path, patch, encoder, **world) == n, f"{change} did not miss"


def test_the_encoder_code_is_part_of_the_key(monkeypatch):
    from chexretrieve.encoders.phantom import PhantomEncoder

    fake = object.__new__(PhantomEncoder)
    fake.encoder_id = "phantom:0123456789ab"
    before = cache_keys.encoder_inputs(fake)
    _fingerprint_changed(monkeypatch, cache_keys.PHANTOM_ENCODER_MODULES)
    assert cache_keys.encoder_inputs(fake) != before


TEXT_CHANGES = {
    "the sentences": lambda: (Counting(), ["effusion", "no effusions"]),
    "the encoder": lambda: (Counting(encoder_id="stand-in:9"), ["effusion", "no effusion"]),
    "the text backbone": lambda: (Counting(backbone="b2"), ["effusion", "no effusion"]),
    "the device": lambda: (Counting(device="cuda"), ["effusion", "no effusion"]),
}


@pytest.mark.parametrize("change", sorted(TEXT_CHANGES))
def test_each_input_of_the_text_embedding_key_is_a_miss(change, tmp_path):
    cache = EmbeddingCache(tmp_path)
    texts = ["effusion", "no effusion"]
    embed_texts_cached(Counting(), texts, cache)
    before = Counting.sentences
    embed_texts_cached(Counting(), texts, cache)
    assert Counting.sentences == before  # a hit
    encoder, changed = TEXT_CHANGES[change]()
    embed_texts_cached(encoder, changed, cache)
    assert Counting.sentences == before + 2, f"{change} did not miss"


def test_a_tokenizer_fingerprint_changes_the_text_key(tmp_path):
    cache = EmbeddingCache(tmp_path)
    plain, tokenized = Counting(), Counting()
    tokenized.text_fingerprint = "bpe-v2"
    embed_texts_cached(plain, ["a"], cache)
    before = Counting.sentences
    embed_texts_cached(tokenized, ["a"], cache)
    assert Counting.sentences == before + 1


def test_image_file_keys_cover_the_files_and_the_reader(tmp_path, monkeypatch):
    from chexretrieve.evaluation.sources import embed_image_files

    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.png")
        paths[-1].write_bytes(b"x" * (i + 1))
    cache = EmbeddingCache(tmp_path / "cache")
    reader = lambda path: np.full((64, 64), 0.5, np.float32)  # noqa: E731
    embed = lambda encoder: embed_image_files(  # noqa: E731
        encoder, paths, cache, reader=reader, show_progress=False
    )
    embed(Counting())
    before = Counting.images
    embed(Counting())
    assert Counting.images == before  # a hit
    paths[1].write_bytes(b"changed content")  # another size
    embed(Counting())
    assert Counting.images == before + 3
    _fingerprint_changed(monkeypatch, cache_keys._READER_CODE)
    embed(Counting())
    assert Counting.images == before + 6
    embed(Counting(device="cuda"))
    assert Counting.images == before + 9
