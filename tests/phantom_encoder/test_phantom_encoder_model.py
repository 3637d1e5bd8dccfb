"""Preprocessing, the networks and the weights file of the phantom encoder."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from chexretrieve.encoders.base import EncoderError
from chexretrieve.encoders.phantom_model import (
    ImageTower,
    architecture_of,
    build_towers,
    images_to_tensor,
    load_towers,
    read_phantom_weights,
    save_phantom_weights,
)


def test_a_wide_image_is_shrunk_and_centred_on_black():
    image = np.full((20, 40), 0.5, dtype=np.float32)
    pixels = images_to_tensor([image], 16, 0.0, 1.0)
    assert pixels.shape == (1, 1, 16, 16)
    assert torch.all(pixels[0, 0, :4] == 0) and torch.all(pixels[0, 0, 12:] == 0)
    assert torch.allclose(pixels[0, 0, 4:12], torch.full((8, 16), 0.5))


def test_a_square_image_of_the_input_size_is_only_normalised():
    image = np.random.default_rng(0).random((32, 32)).astype(np.float32)
    pixels = images_to_tensor([image], 32, 0.25, 0.5)
    assert torch.allclose(pixels[0, 0], (torch.from_numpy(image) - 0.25) / 0.5)


def test_shrinking_by_two_averages_neighbouring_pixels():
    image = np.kron(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, np.ones((2, 2)))
    pixels = images_to_tensor([image.astype(np.float32)], 4, 0.0, 1.0)
    assert torch.allclose(pixels[0, 0], torch.arange(16.0).reshape(4, 4) / 16, atol=1e-6)


def test_image_tower_shapes_and_bad_sizes():
    tower = ImageTower(32, (4, 8, 8), embed_dim=6, depth=2)
    assert tower(torch.rand(3, 1, 32, 32)).shape == (3, 6)
    with pytest.raises(ValueError, match="multiple of 4"):
        ImageTower(30, (4, 8), 6)


def _architecture():
    return architecture_of(32, (4, 8), 1, 6, 0.45, 0.25)


def test_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    tower, projection = build_towers(_architecture())
    path = tmp_path / "w.pt"
    sha = save_phantom_weights(path, _architecture(), tower.eval(), projection, 2.5, {"note": "x"})
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    record, digest = read_phantom_weights(path)
    assert digest == sha and record["logit_scale"] == 2.5
    assert record["provenance"] == {"note": "x"}
    tower2, projection2 = load_towers(record, path)
    x, t = torch.rand(2, 1, 32, 32), torch.rand(2, 384)
    assert torch.equal(tower(x), tower2(x)) and torch.equal(projection(t), projection2(t))


def test_unusable_weights_files_are_named(tmp_path):
    with pytest.raises(EncoderError, match="does not exist"):
        read_phantom_weights(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(EncoderError, match="junk.pt is not a readable phantom weights file"):
        read_phantom_weights(junk)
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(EncoderError, match="no 'chexretrieve-phantom-encoder' format tag"):
        read_phantom_weights(other)
    tower, projection = build_towers(_architecture())
    old = tmp_path / "old.pt"
    save_phantom_weights(old, _architecture(), tower, projection, 1.0, {})
    record = torch.load(old, weights_only=True)
    record["version"] = 0
    torch.save(record, old)
    with pytest.raises(EncoderError, match="version 0"):
        read_phantom_weights(old)
    record["version"] = 1
    record["architecture"]["embed_dim"] = 7
    torch.save(record, old)
    with pytest.raises(EncoderError, match="do not match its architecture"):
        load_towers(read_phantom_weights(old)[0], old)
