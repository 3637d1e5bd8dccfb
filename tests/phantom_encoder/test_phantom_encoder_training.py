"""A miniature training run end to end: it learns, is seeded, and its weights serve as Encoder."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from phantom_encoder_fakes import fake_generate, fake_sentence_encoder

from chexretrieve.encoders.base import Encoder
from chexretrieve.encoders.config import EncoderConfig
from chexretrieve.encoders.phantom import load_phantom_encoder
from chexretrieve.encoders.phantom_model import read_phantom_weights
from chexretrieve.phantom.config import PhantomConfig
from chexretrieve.phantom.sampling import patient_of
from chexretrieve.phantom.training import PhantomTrainingConfig, train_phantom_encoder
from chexretrieve.phantom.zero_shot import split_indices

TINY = PhantomTrainingConfig(
    n_images=8,
    steps=8,
    batch_size=8,
    report_probability=1.0,
    image_size=32,
    render_size=64,
    widths=(4, 8),
    embed_dim=8,
    learning_rate=0.005,
    warmup_fraction=0.0,
    augment=False,
    threads=1,
    device="cpu",
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("phantom") / "tiny.pt"
    result = train_phantom_encoder(
        TINY, out, fake_sentence_encoder, fake_generate, show_progress=False
    )
    return result


def test_training_lowers_the_loss_and_writes_weights(tiny_run):
    assert len(tiny_run.losses) == TINY.steps
    assert all(math.isfinite(loss) for loss in tiny_run.losses)
    assert np.mean(tiny_run.losses[-3:]) < 0.8 * np.mean(tiny_run.losses[:3])
    record, digest = read_phantom_weights(tiny_run.path)
    assert digest == tiny_run.sha256
    assert record["provenance"]["training"]["steps"] == TINY.steps
    assert record["provenance"]["generator"]["size"] == TINY.render_size
    # the run drew the first training-split indices; no validation patient is among them
    world = PhantomConfig(size=TINY.render_size)
    used = split_indices(TINY.seed, "train", TINY.n_images, world)
    assert record["provenance"]["generator_indices"] == [used[0], used[-1]]
    assert all(patient_of(TINY.seed, i, world).split == "train" for i in used)


def test_training_changes_the_weights_and_is_seeded(tiny_run, tmp_path):
    again = train_phantom_encoder(
        TINY, tmp_path / "again.pt", fake_sentence_encoder, fake_generate, show_progress=False
    )
    assert again.losses == tiny_run.losses
    assert again.sha256 == tiny_run.sha256  # byte-identical file, so the same encoder id
    trained, _ = read_phantom_weights(tiny_run.path)
    repeated, _ = read_phantom_weights(again.path)
    for key, value in trained["image_tower"].items():
        assert torch.equal(value, repeated["image_tower"][key]), key
    untouched = train_phantom_encoder(
        PhantomTrainingConfig(**{**TINY.__dict__, "steps": 1, "learning_rate": 1e-12}),
        tmp_path / "untouched.pt",
        fake_sentence_encoder,
        fake_generate,
        show_progress=False,
    )
    start, _ = read_phantom_weights(untouched.path)
    moved = [
        key
        for key, value in trained["image_tower"].items()
        if value.is_floating_point() and not torch.allclose(value, start["image_tower"][key])
    ]
    assert "head.weight" in moved and "stem.0.weight" in moved


def test_trained_weights_serve_the_encoder_protocol(tiny_run):
    encoder = load_phantom_encoder(
        tiny_run.path, EncoderConfig(device="cpu", batch_size=3), fake_sentence_encoder
    )
    assert isinstance(encoder, Encoder)
    assert encoder.encoder_id == "phantom:" + tiny_run.sha256[:12]
    assert encoder.embed_dim == TINY.embed_dim
    assert encoder.inv_temperature == pytest.approx(math.exp(tiny_run.logit_scale))
    world = type("World", (), {"size": 50})()
    images = [fake_generate(0, i, world).image for i in range(4)] + [np.zeros((20, 70), np.float32)]
    vectors = encoder.embed_images(images)
    assert vectors.shape == (5, TINY.embed_dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors, encoder.embed_images(images))
    one_by_one = np.concatenate([encoder.embed_images([image]) for image in images])
    assert np.allclose(vectors, one_by_one, atol=1e-5)
    texts = encoder.embed_texts(["A mass is seen.", "No mass.", "A mass is seen."])
    assert texts.shape == (3, TINY.embed_dim)
    assert np.allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(texts[0], texts[2]) and not np.allclose(texts[0], texts[1])
    assert encoder.embed_texts([]).shape == (0, TINY.embed_dim)


def test_the_encoder_refuses_bad_input(tiny_run):
    encoder = load_phantom_encoder(
        tiny_run.path, EncoderConfig(device="cpu"), fake_sentence_encoder
    )
    with pytest.raises(ValueError, match="2-D greyscale"):
        encoder.embed_images([np.zeros((4, 4, 3), np.float32)])
    with pytest.raises(ValueError, match="scaled to"):
        encoder.embed_images([np.full((8, 8), 2.0, np.float32)])
    with pytest.raises(ValueError, match="wrap a single one in a list"):
        encoder.embed_texts("no mass")
