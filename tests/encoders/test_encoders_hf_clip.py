"""Hugging Face CLIP folders: a tiny CLIPModel saved with save_pretrained, loaded offline."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
import torch
from encoder_builders import write_hf_clip_folder

from chexretrieve.encoders import Encoder, EncoderConfig, EncoderError, load_encoder
from chexretrieve.encoders.hf_clip import greyscale_to_rgb


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, tokenizer_folder):
    return write_hf_clip_folder(tmp_path_factory.mktemp("tiny-hf-clip"), tokenizer_folder)


@pytest.fixture(scope="module")
def hf_encoder(hf_folder):
    return load_encoder(f"hf-clip:{hf_folder}")


def _images() -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    return [rng.random(shape, dtype=np.float32) for shape in [(50, 40), (32, 32), (20, 90)]]


def test_shapes_norms_id_and_temperature(hf_encoder, hf_folder) -> None:
    assert isinstance(hf_encoder, Encoder)
    assert hf_encoder.embed_dim == 16
    assert hf_encoder.inv_temperature == pytest.approx(20.0, rel=1e-5)
    digest = hashlib.sha256(
        b"model.safetensors\0" + (hf_folder / "model.safetensors").read_bytes()
    ).hexdigest()[:12]
    assert hf_encoder.encoder_id == f"hf-clip:{digest}"
    images = hf_encoder.embed_images(_images())
    assert images.shape == (3, 16) and images.dtype == np.float32
    assert np.allclose(np.linalg.norm(images, axis=1), 1, atol=1e-6)
    assert np.array_equal(images, hf_encoder.embed_images(_images()))
    texts = hf_encoder.embed_texts(["the effusion", "no effusion", "pleural " * 60])
    assert texts.shape == (3, 16) and np.allclose(np.linalg.norm(texts, axis=1), 1, atol=1e-6)
    assert hf_encoder.max_text_tokens == 40  # the model's positions, below the configured 77


def test_greyscale_becomes_rgb_for_the_processor(hf_encoder) -> None:
    image = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    rgb = np.asarray(greyscale_to_rgb(image))
    assert rgb.shape == (3, 4, 3) and rgb.dtype == np.uint8
    assert (rgb[..., 0] == np.rint(image * 255)).all()
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()

    images = _images()
    pixels = hf_encoder.image_processor(
        images=[greyscale_to_rgb(i) for i in images], return_tensors="pt"
    )["pixel_values"]
    assert pixels.shape == (3, 3, 32, 32)
    with torch.no_grad():
        raw = hf_encoder.model.get_image_features(pixel_values=pixels)
    raw = (raw if isinstance(raw, torch.Tensor) else raw.pooler_output).numpy()
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert np.allclose(hf_encoder.embed_images(images), expected, atol=1e-6)


def test_colour_images_keep_their_colour(hf_encoder) -> None:
    grey = _images()
    as_colour = [np.repeat(g[:, :, None], 3, axis=2) for g in grey]
    # a grey image given as colour is the same image
    assert np.allclose(hf_encoder.embed_rgb_images(as_colour), hf_encoder.embed_images(grey))
    rng = np.random.default_rng(5)
    colour = [rng.random((30, 30, 3), dtype=np.float32) for _ in range(2)]
    swapped = [c[:, :, ::-1] for c in colour]  # red and blue exchanged: a different picture
    a, b = hf_encoder.embed_rgb_images(colour), hf_encoder.embed_rgb_images(swapped)
    assert a.shape == (2, 16) and np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-6)
    assert not np.allclose(a, b, atol=1e-4)
    for bad, message in [
        ([grey[0]], r"shape \(50, 40\): embed_rgb_images takes \(rows, columns, 3\)"),
        ([np.zeros((4, 4, 4), np.float32)], r"shape \(4, 4, 4\)"),
        ([colour[0] * 2], r"values in \[.*\]: encoders take images scaled to \[0, 1\]"),
        (colour[0], "wrap a single image in a list"),
    ]:
        with pytest.raises(ValueError, match=message):
            hf_encoder.embed_rgb_images(bad)


def test_batch_size_changes_nothing(hf_encoder, hf_folder) -> None:
    single = load_encoder(f"hf-clip:{hf_folder}", EncoderConfig(batch_size=1))
    assert np.allclose(
        single.embed_images(_images()), hf_encoder.embed_images(_images()), atol=1e-6
    )
    sentences = ["the effusion", "no pleural effusion in the left lung"]
    assert np.allclose(single.embed_texts(sentences), hf_encoder.embed_texts(sentences), atol=1e-6)


def test_everything_is_read_with_local_files_only(hf_folder, monkeypatch) -> None:
    import transformers

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    seen = []
    for name in ("AutoModel", "AutoImageProcessor", "AutoTokenizer"):
        cls = getattr(transformers, name)
        original = cls.from_pretrained

        def spy(*args, _original=original, _name=name, **kwargs):
            seen.append((_name, kwargs.get("local_files_only")))
            return _original(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    load_encoder(f"hf-clip:{hf_folder}")
    assert sorted(seen) == [
        ("AutoImageProcessor", True),
        ("AutoModel", True),
        ("AutoTokenizer", True),
    ]


def test_bad_folders_name_the_problem(tmp_path, hf_folder) -> None:
    with pytest.raises(
        EncoderError, match="openai/clip-vit-base-patch32 does not exist.*not downloaded"
    ):
        load_encoder("hf-clip:openai/clip-vit-base-patch32")
    with pytest.raises(EncoderError, match="has no config.json"):
        load_encoder(f"hf-clip:{tmp_path}")
    (tmp_path / "config.json").write_text((hf_folder / "config.json").read_text())
    with pytest.raises(EncoderError, match="has no weights"):
        load_encoder(f"hf-clip:{tmp_path}")
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(EncoderError, match=f"{tmp_path} cannot be loaded"):
        load_encoder(f"hf-clip:{tmp_path}")


def test_metaclip_2_folders_load_through_the_same_route(tmp_path, tokenizer_folder) -> None:
    write_hf_clip_folder(tmp_path, tokenizer_folder, "metaclip_2", projection_dim=8, layers=1)
    encoder = load_encoder(f"hf-clip:{tmp_path}")
    assert encoder.encoder_id.startswith("hf-metaclip_2:")
    images, texts = encoder.embed_images(_images()), encoder.embed_texts(["the effusion"])
    assert images.shape == (3, 8) and texts.shape == (1, 8)
    assert np.allclose(np.linalg.norm(images, axis=1), 1, atol=1e-6)
    assert np.allclose(np.linalg.norm(texts, axis=1), 1, atol=1e-6)
