"""Every evaluation embedding cache key changes with every input its content depends on.

Issue 32: the density embedding cache key left out RENDER_VERSION, so a report made before the
L/R-marker fix and one made after it read the same cache file. Each test changes one input and
sees a miss (a new key, or a recomputation through the real cache path).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.evaluation import cache_keys, density_data
from chexretrieve.evaluation.config import PhantomSourceConfig
from chexretrieve.evaluation.density_data import (
    DensityWorldConfig,
    external_cache_key,
    world_cache_key,
    world_embeddings,
)
from chexretrieve.evaluation.phantom_source import phantom_embedding_key
from chexretrieve.evaluation.sources import EmbeddingCache, embed_texts_cached

ENCODER = {"id": "phantom:abc", "weights": "sha256:00", "image_probe": "11"}
GENERATOR = {"render_version": 2, "generator": "ff00"}
TINY = DensityWorldConfig(seed=5, n_archive=3, n_heldout=2, n_control=2, n_shifted=1, size=64)


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return f"{value}-changed"


def test_world_key_changes_with_every_setting_and_fingerprint():
    base = world_cache_key(TINY, ENCODER, GENERATOR, "shifts")
    assert base == world_cache_key(TINY, dict(ENCODER), dict(GENERATOR), "shifts")
    keys = set()
    for field in dataclasses.fields(DensityWorldConfig):
        value = _changed(getattr(TINY, field.name))
        changed = dataclasses.replace(TINY, **{field.name: value})
        keys.add(world_cache_key(changed, ENCODER, GENERATOR, "shifts"))
    for name in ENCODER:
        keys.add(
            world_cache_key(TINY, {**ENCODER, name: _changed(ENCODER[name])}, GENERATOR, "shifts")
        )
    for name in GENERATOR:
        keys.add(
            world_cache_key(TINY, ENCODER, {**GENERATOR, name: _changed(GENERATOR[name])}, "shifts")
        )
    keys.add(world_cache_key(TINY, ENCODER, GENERATOR, "other shifts"))
    count = len(dataclasses.fields(DensityWorldConfig)) + len(ENCODER) + len(GENERATOR) + 1
    assert len(keys) == count and base not in keys


def test_world_key_changes_with_the_data_version(monkeypatch):
    base = world_cache_key(TINY, ENCODER, GENERATOR, "shifts")
    monkeypatch.setattr(density_data, "DATA_VERSION", density_data.DATA_VERSION + 1)
    assert world_cache_key(TINY, ENCODER, GENERATOR, "shifts") != base
    assert external_cache_key("images", ENCODER) != external_cache_key("images2", ENCODER)
    assert external_cache_key("images", ENCODER) != external_cache_key(
        "images", {**ENCODER, "weights": "sha256:01"}
    )


def test_generator_fingerprint_carries_render_version_and_pixels(monkeypatch):
    from chexretrieve.phantom import PhantomConfig, config

    small = PhantomConfig(size=64)
    base = cache_keys.phantom_generator_fingerprint(3, small)
    assert base["render_version"] == config.RENDER_VERSION
    assert cache_keys.phantom_generator_fingerprint(4, small) != base  # another world
    assert cache_keys.phantom_generator_fingerprint(3, PhantomConfig(size=72)) != base
    monkeypatch.setattr(config, "RENDER_VERSION", config.RENDER_VERSION + 1)
    assert cache_keys.phantom_generator_fingerprint(3, small) != base


def test_encoder_fingerprint_sees_weights_file_and_preprocessing(tmp_path):
    class FileEncoder(StandInEncoder):
        def __init__(self, source, scale=1.0):
            super().__init__(dim=8)
            self.source, self.scale = source, scale

        def embed_images(self, images):  # "preprocessing": a contrast change before the tower
            return super().embed_images([np.clip(im * self.scale, 0, 1) for im in images])

    weights = tmp_path / "w.pt"
    weights.write_bytes(b"weights one")
    base = cache_keys.encoder_fingerprint(FileEncoder(weights), texts=True)
    assert base["weights"] == "sha256:" + cache_keys.file_sha256(weights)
    assert cache_keys.encoder_fingerprint(FileEncoder(weights), texts=True) == base
    weights.write_bytes(b"weights two")
    assert (
        cache_keys.encoder_fingerprint(FileEncoder(weights), texts=True)["weights"]
        != base["weights"]
    )
    weights.write_bytes(b"weights one")
    changed = cache_keys.encoder_fingerprint(FileEncoder(weights, scale=0.5), texts=True)
    assert changed["image_probe"] != base["image_probe"] and changed["weights"] == base["weights"]


def test_phantom_source_key_changes_with_every_input():
    config = PhantomSourceConfig(seed=0, n_images=10)
    base = phantom_embedding_key(config, "phantom:abc", ENCODER, GENERATOR)
    keys = {
        phantom_embedding_key(
            dataclasses.replace(config, seed=1), "phantom:abc", ENCODER, GENERATOR
        ),
        phantom_embedding_key(
            dataclasses.replace(config, n_images=11), "phantom:abc", ENCODER, GENERATOR
        ),
        phantom_embedding_key(
            dataclasses.replace(config, validation_labels="reported"),
            "phantom:abc",
            ENCODER,
            GENERATOR,
        ),
        phantom_embedding_key(config, "phantom:abd", ENCODER, GENERATOR),
        phantom_embedding_key(config, "phantom:abc", {**ENCODER, "image_probe": "12"}, GENERATOR),
        phantom_embedding_key(config, "phantom:abc", {**ENCODER, "weights": "x"}, GENERATOR),
        phantom_embedding_key(config, "phantom:abc", ENCODER, {**GENERATOR, "render_version": 3}),
        phantom_embedding_key(config, "phantom:abc", ENCODER, {**GENERATOR, "generator": "ee"}),
    }
    assert len(keys) == 8 and base not in keys


def test_text_cache_misses_when_the_text_tower_changes(tmp_path):
    class Texts(StandInEncoder):
        def __init__(self, salt=""):
            super().__init__(dim=8)
            self.salt = salt

        def embed_texts(self, texts):  # the same id, another text tower (a new MiniLM release)
            return super().embed_texts([t + self.salt for t in texts])

    cache = EmbeddingCache(tmp_path)
    first = embed_texts_cached(Texts(), ["a", "b"], cache)
    assert len(list(tmp_path.glob("*.npy"))) == 1
    again = embed_texts_cached(Texts(), ["a", "b"], cache)
    np.testing.assert_array_equal(first, again)
    other = embed_texts_cached(Texts(salt="!"), ["a", "b"], cache)
    assert len(list(tmp_path.glob("*.npy"))) == 2 and not np.allclose(first, other)


class _Counting(StandInEncoder):
    def __init__(self, dim=8):
        super().__init__(dim=dim)
        self.embedded = 0

    def embed_images(self, images):
        self.embedded += len(images)
        return super().embed_images(images)


def _run(tmp_path: Path, encoder) -> list[str]:
    heard: list[str] = []
    world_embeddings([encoder], TINY, tmp_path, heard.append)
    return heard


def test_world_cache_hits_then_misses_on_render_version_and_generator(tmp_path, monkeypatch):
    from chexretrieve.phantom import config

    assert any("drawing" in h for h in _run(tmp_path, _Counting()))
    assert any(density_data.CACHED_MESSAGE in h for h in _run(tmp_path, _Counting()))
    monkeypatch.setattr(config, "RENDER_VERSION", config.RENDER_VERSION + 1)  # the case
    assert any("drawing" in h for h in _run(tmp_path, _Counting()))
    assert any(density_data.CACHED_MESSAGE in h for h in _run(tmp_path, _Counting()))
    # a generator change that forgot to bump RENDER_VERSION: the pixels' fingerprint misses
    import chexretrieve.phantom as phantom

    original = phantom.generate_case

    def brighter(seed, index, cfg=phantom.PhantomConfig(), overrides=None):
        case = original(seed, index, cfg, overrides)
        case.image = np.clip(case.image * 1.01, 0, 1)
        return case

    monkeypatch.setattr(phantom, "generate_case", brighter)
    assert any("drawing" in h for h in _run(tmp_path, _Counting()))


def test_world_cache_misses_on_shift_code_and_encoder(tmp_path, monkeypatch):
    assert any("drawing" in h for h in _run(tmp_path, _Counting()))
    assert any("drawing" in h for h in _run(tmp_path, _Counting(dim=9)))  # another encoder
    original = density_data.near_shift

    def noisier(image, kind, rng):
        return np.clip(original(image, kind, rng) + 0.01, 0, 1)

    monkeypatch.setattr(density_data, "near_shift", noisier)  # the shifts' code changed
    encoder = _Counting()
    assert any("drawing" in h for h in _run(tmp_path, encoder)) and encoder.embedded > 0


def test_world_sets_have_the_documented_layout(tmp_path):
    (world,) = world_embeddings([StandInEncoder(dim=8)], TINY, tmp_path)
    assert world.archive.shape == (3, 8) and len(world.archive_truth) == 3
    assert world.heldout.shape == (2, 8) and world.control.shape == (2, 8)
    assert sorted(set(world.shifted_group)) == ["display", "near"]
    assert len(world.shifted) == 13 and set(world.shifted_source) == {7}
    np.testing.assert_allclose(np.linalg.norm(world.shifted, axis=1), 1.0, atol=1e-5)


def test_world_settings_reject_nonsense():
    with pytest.raises(ValueError, match="n_control must be at least 1"):
        DensityWorldConfig(seed=2, n_control=0)
    with pytest.raises(ValueError, match="world seed"):
        DensityWorldConfig(seed=-1)
