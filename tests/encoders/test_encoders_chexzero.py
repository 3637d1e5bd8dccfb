"""CheXzero: preprocessing against a plain re-statement, loading tiny checkpoints, and every way a
checkpoint can be wrong."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from encoder_builders import tiny_clip_state_dict
from PIL import Image

from chexretrieve.encoders import Encoder, EncoderConfig, EncoderError, load_encoder
from chexretrieve.encoders.chexzero import pad_to_square, preprocess_chexzero

MEAN, STD = 101.48761, 83.43944


def _bicubic_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Rows of weights for cubic convolution (a = -0.75), half-pixel centres, edge clamping."""
    a = -0.75

    def kernel(t: float) -> float:
        t = abs(t)
        if t <= 1:
            return (a + 2) * t**3 - (a + 3) * t**2 + 1
        if t < 2:
            return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
        return 0.0

    weights = np.zeros((n_out, n_in))
    for out in range(n_out):
        source = (out + 0.5) * n_in / n_out - 0.5
        base = math.floor(source)
        for tap in range(base - 1, base + 3):
            weights[out, min(max(tap, 0), n_in - 1)] += kernel(source - tap)
    return weights


def _restated_chexzero_canvas(image: np.ndarray) -> np.ndarray:
    """CheXzero's 320 x 320 canvas, step by step on an 8-bit PIL image (0-255 scale)."""
    grey = Image.fromarray(np.rint(image * 255).astype(np.uint8), mode="L")
    width, height = grey.size
    ratio = 320 / max(width, height)
    new_size = (int(width * ratio), int(height * ratio))
    grey = grey.resize(new_size, Image.Resampling.LANCZOS)
    canvas = Image.new("L", (320, 320))
    canvas.paste(grey, ((320 - new_size[0]) // 2, (320 - new_size[1]) // 2))
    return np.asarray(canvas, dtype=np.float64)


def _restated_model_input(canvas: np.ndarray, resolution: int) -> np.ndarray:
    """Normalise the canvas, resize it with the naive bicubic matrix, repeat to 3 channels."""
    normalised = (canvas - MEAN) / STD
    matrix = _bicubic_matrix(320, resolution)
    return np.repeat((matrix @ normalised @ matrix.T)[None], 3, axis=0)


@pytest.mark.parametrize("shape", [(300, 200), (180, 400), (64, 64), (7, 700), (1000, 999)])
def test_preprocessing_matches_a_plain_restatement(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    # noise: a wrong filter, size or offset would change the canvas by tens of grey levels
    image = rng.random(shape, dtype=np.float32)

    # steps 1-2: the padded 8-bit canvas is CheXzero's, pixel for pixel
    canvas = pad_to_square(np.rint(image * 255).astype(np.uint8))
    assert canvas.dtype == np.uint8
    assert np.array_equal(canvas, _restated_chexzero_canvas(image))

    # steps 3-5 from that canvas: normalisation, bicubic resize, three channels
    ours = preprocess_chexzero(image, 224)
    assert ours.shape == (3, 224, 224) and ours.dtype == torch.float32
    assert np.abs(ours.numpy() - _restated_model_input(canvas.astype(np.float64), 224)).max() < 1e-4


def test_padding_geometry_is_exact() -> None:
    square = pad_to_square(np.full((100, 250), 255, dtype=np.uint8))
    rows, cols = np.nonzero(square > 128)
    assert (rows.min(), rows.max() + 1) == ((320 - 128) // 2, (320 - 128) // 2 + 128)
    assert (cols.min(), cols.max() + 1) == (0, 320)
    tall = pad_to_square(np.full((321, 3), 255, dtype=np.uint8))
    rows, cols = np.nonzero(tall > 128)
    assert (cols.min(), cols.max() + 1) == (159, 161)  # 3 * 320 // 321 = 2 columns, centred
    assert (rows.min(), rows.max() + 1) == (0, 320)


@pytest.mark.parametrize("shape", [(1711, 2139), (2139, 1711), (400, 581), (1077, 90)])
def test_long_side_rounding_is_chexzeros_319(shape: tuple[int, int]) -> None:
    # CheXzero's data_process.preprocess: ratio = float(320) / max(size);
    # new_size = tuple([int(x * ratio) for x in size]) -> 319 for 581, 1077 and 2139 pixels
    rng = np.random.default_rng(5)
    image = (0.2 + 0.8 * rng.random(shape)).astype(np.float32)  # never black after resizing
    height, width = shape
    ratio = float(320) / max(width, height)
    new_width, new_height = int(width * ratio), int(height * ratio)
    assert max(new_width, new_height) == 319
    canvas = pad_to_square(np.rint(image * 255).astype(np.uint8))
    assert np.array_equal(canvas, _restated_chexzero_canvas(image))
    rows, cols = np.nonzero(canvas)
    assert (rows.max() - rows.min() + 1, cols.max() - cols.min() + 1) == (new_height, new_width)
    assert (rows.min(), cols.min()) == ((320 - new_height) // 2, (320 - new_width) // 2)


def test_black_image_is_the_normalised_zero_everywhere() -> None:
    pixels = preprocess_chexzero(np.zeros((50, 80), dtype=np.float32), 32)
    assert pixels.shape == (3, 32, 32)
    assert torch.allclose(pixels, torch.full_like(pixels, -MEAN / STD), atol=1e-5)
    white = preprocess_chexzero(np.ones((80, 80), dtype=np.float32), 32)
    assert torch.allclose(white, torch.full_like(white, (255 - MEAN) / STD), atol=1e-4)


@pytest.fixture(scope="module")
def encoder(chexzero_checkpoint, tokenizer_folder):
    return load_encoder(
        f"chexzero:{chexzero_checkpoint}", EncoderConfig(tokenizer_path=tokenizer_folder)
    )


def _images(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.random(shape, dtype=np.float32) for shape in [(300, 200), (64, 64), (90, 400)]]


def test_encoder_shapes_norms_and_determinism(encoder, chexzero_checkpoint) -> None:
    assert isinstance(encoder, Encoder)
    assert encoder.embed_dim == 32
    images = encoder.embed_images(_images())
    assert images.shape == (3, 32) and images.dtype == np.float32
    assert np.allclose(np.linalg.norm(images, axis=1), 1, atol=1e-6)
    assert np.array_equal(images, encoder.embed_images(_images()))
    assert not np.allclose(images[0], images[1])
    texts = encoder.embed_texts(["the effusion", "no effusion", "pleural " * 100])
    assert texts.shape == (3, 32) and texts.dtype == np.float32
    assert np.allclose(np.linalg.norm(texts, axis=1), 1, atol=1e-6)
    assert encoder.embed_images([]).shape == (0, 32)
    assert encoder.embed_texts([]).shape == (0, 32)


def test_encoder_matches_the_model_run_by_hand(encoder) -> None:
    images = _images(1)
    pixels = torch.stack([preprocess_chexzero(image, 32) for image in images])
    with torch.no_grad():
        raw = encoder.model.encode_image(pixels).numpy()
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert np.allclose(encoder.embed_images(images), expected, atol=1e-6)

    ids, ends = encoder.tokenizer.encode_batch(["the effusion"], 77)
    with torch.no_grad():
        raw = encoder.model.encode_text(torch.from_numpy(ids), torch.from_numpy(ends)).numpy()
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert np.allclose(encoder.embed_texts(["the effusion"]), expected, atol=1e-6)


def test_batching_changes_nothing(encoder, chexzero_checkpoint, tokenizer_folder) -> None:
    one_at_a_time = load_encoder(
        f"chexzero:{chexzero_checkpoint}",
        EncoderConfig(tokenizer_path=tokenizer_folder, batch_size=1),
    )
    assert one_at_a_time.batch_size == 1 and encoder.batch_size == 16
    assert np.allclose(
        one_at_a_time.embed_images(_images()), encoder.embed_images(_images()), atol=1e-6
    )
    sentences = ["the effusion", "no pleural effusion in the left lung base"]
    assert np.allclose(
        one_at_a_time.embed_texts(sentences), encoder.embed_texts(sentences), atol=1e-6
    )


def test_encoder_id_is_the_file_hash(encoder, chexzero_checkpoint, tmp_path) -> None:
    digest = hashlib.sha256(Path(chexzero_checkpoint).read_bytes()).hexdigest()[:12]
    assert encoder.encoder_id == f"chexzero:{digest}"
    again = load_encoder(f"chexzero:{chexzero_checkpoint}")
    assert again.encoder_id == encoder.encoder_id
    other = tmp_path / "other.pt"
    torch.save(tiny_clip_state_dict(seed=1), other)
    assert load_encoder(f"chexzero:{other}").encoder_id != encoder.encoder_id


def test_inverse_temperature_is_the_capped_logit_scale(encoder, tmp_path) -> None:
    assert encoder.inv_temperature == pytest.approx(1 / 0.07, rel=1e-6)
    hot = tmp_path / "hot.pt"
    torch.save(tiny_clip_state_dict(logit_scale=math.log(250.0)), hot)
    assert load_encoder(f"chexzero:{hot}").inv_temperature == 100.0


def test_wrapped_checkpoints_load_the_same_weights(encoder, tmp_path) -> None:
    state = tiny_clip_state_dict(seed=0)
    variants = {
        "wrapped.pt": {"state_dict": state, "epoch": 3},
        "dataparallel.pt": {f"module.{k}": v for k, v in state.items()},
        "metadata.pt": {**state, "input_resolution": torch.tensor(32), "vocab_size": 524},
        "half.pt": {k: v.half() for k, v in state.items()},
    }
    expected = encoder.embed_images(_images())
    for name, content in variants.items():
        torch.save(content, tmp_path / name)
        loaded = load_encoder(f"chexzero:{tmp_path / name}")
        tolerance = 2e-3 if name == "half.pt" else 1e-6
        assert np.allclose(loaded.embed_images(_images()), expected, atol=tolerance), name


def test_text_without_a_tokenizer_says_what_to_pass(chexzero_checkpoint, monkeypatch) -> None:
    monkeypatch.delenv("CHEXRETRIEVE_TOKENIZER", raising=False)
    encoder = load_encoder(f"chexzero:{chexzero_checkpoint}")
    assert encoder.embed_images(_images()).shape == (3, 32)
    with pytest.raises(EncoderError, match=r"tiny_chexzero.pt\?tokenizer=PATH.*CHEXRETRIEVE_TOK"):
        encoder.embed_texts(["the effusion"])


def test_the_tokenizer_comes_with_the_spec(
    encoder, chexzero_checkpoint, tokenizer_gz, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("CHEXRETRIEVE_TOKENIZER", raising=False)
    texts = ["the effusion", "no pneumothorax"]
    expected = encoder.embed_texts(texts)  # tokenizer given by EncoderConfig.tokenizer_path
    in_spec = load_encoder(f"chexzero:{chexzero_checkpoint}?tokenizer={tokenizer_gz}")
    np.testing.assert_array_equal(in_spec.embed_texts(texts), expected)
    beside = tmp_path / "checkpoint.pt"
    beside.write_bytes(Path(chexzero_checkpoint).read_bytes())
    (tmp_path / "bpe_simple_vocab_16e6.txt.gz").write_bytes(Path(tokenizer_gz).read_bytes())
    np.testing.assert_array_equal(load_encoder(f"chexzero:{beside}").embed_texts(texts), expected)
    monkeypatch.setenv("CHEXRETRIEVE_TOKENIZER", str(tokenizer_gz))
    from_env = load_encoder(f"chexzero:{chexzero_checkpoint}")
    np.testing.assert_array_equal(from_env.embed_texts(texts), expected)


def _save(path: Path, content) -> Path:
    torch.save(content, path)
    return path


def test_missing_empty_truncated_and_foreign_files(chexzero_checkpoint, tmp_path) -> None:
    with pytest.raises(EncoderError, match="nowhere.pt does not exist"):
        load_encoder(f"chexzero:{tmp_path / 'nowhere.pt'}")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(EncoderError, match="empty.pt is empty"):
        load_encoder(f"chexzero:{empty}")
    truncated = tmp_path / "truncated.pt"
    data = Path(chexzero_checkpoint).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(EncoderError, match="truncated.pt cannot be read by torch.load"):
        load_encoder(f"chexzero:{truncated}")
    text = tmp_path / "notes.pt"
    text.write_text("these are not weights")
    with pytest.raises(EncoderError, match="notes.pt cannot be read by torch.load"):
        load_encoder(f"chexzero:{text}")
    with pytest.raises(EncoderError, match="list.pt holds a list, not a state dict"):
        load_encoder(f"chexzero:{_save(tmp_path / 'list.pt', [torch.zeros(3)])}")
    with pytest.raises(EncoderError, match="nothing.pt is a dict without tensors"):
        load_encoder(f"chexzero:{_save(tmp_path / 'nothing.pt', {'epoch': 3})}")
    pickled_object = _save(tmp_path / "object.pt", {"weights": Path("x")})
    with pytest.raises(EncoderError, match="object.pt cannot be read .*other than tensors"):
        load_encoder(f"chexzero:{pickled_object}")


def test_mismatched_checkpoints_name_the_tensors(tmp_path) -> None:
    state = tiny_clip_state_dict()
    del state["transformer.resblocks.1.ln_2.bias"]
    with pytest.raises(
        EncoderError,
        match=r"minus.pt does not match .*missing 1 tensor\(s\): transformer.resblocks",
    ):
        load_encoder(f"chexzero:{_save(tmp_path / 'minus.pt', state)}")

    state = tiny_clip_state_dict()
    state["visual.transformer.resblocks.0.mlp.c_fc.weight"] = torch.zeros(100, 64)
    with pytest.raises(EncoderError, match=r"wrong shape for 1 tensor\(s\): visual.*\(100, 64\)"):
        load_encoder(f"chexzero:{_save(tmp_path / 'shape.pt', state)}")

    state = {**tiny_clip_state_dict(), "visual.extra_head.weight": torch.zeros(2)}
    with pytest.raises(EncoderError, match=r"unexpected 1 tensor\(s\): visual.extra_head.weight"):
        load_encoder(f"chexzero:{_save(tmp_path / 'extra.pt', state)}")

    state = tiny_clip_state_dict()
    del state["token_embedding.weight"]
    with pytest.raises(EncoderError, match="no_tokens.pt is not a CLIP ViT .*token_embedding"):
        load_encoder(f"chexzero:{_save(tmp_path / 'no_tokens.pt', state)}")

    resnet = {"visual.layer1.0.conv1.weight": torch.zeros(4, 4, 1, 1)}
    with pytest.raises(EncoderError, match="ResNet CLIP checkpoint"):
        load_encoder(f"chexzero:{_save(tmp_path / 'resnet.pt', resnet)}")

    state = tiny_clip_state_dict()
    state["ln_final.weight"][3] = float("nan")
    with pytest.raises(EncoderError, match="nan.pt has NaN or infinite values .*ln_final.weight"):
        load_encoder(f"chexzero:{_save(tmp_path / 'nan.pt', state)}")


def test_tokenizer_larger_than_the_model_is_refused(tmp_path, tokenizer_folder) -> None:
    small = _save(tmp_path / "small_vocab.pt", tiny_clip_state_dict(vocab_size=300))
    with pytest.raises(EncoderError, match="has 524 tokens but checkpoint .*small_vocab.pt embeds"):
        load_encoder(f"chexzero:{small}", EncoderConfig(tokenizer_path=tokenizer_folder))


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([np.zeros((4, 4, 3), np.float32)], "image 0 has shape \\(4, 4, 3\\)"),
        ([np.zeros((4, 4), np.float32), np.zeros((4, 4), np.uint16)], "image 1 has dtype uint16"),
        ([np.full((4, 4), 2.0, np.float32)], "image 0 has values in \\[2, 2\\]"),
        ([np.full((4, 4), np.nan, np.float32)], "image 0 contains NaN"),
        ([np.zeros((0, 4), np.float32)], "image 0 is empty"),
        (np.zeros((4, 4), np.float32), "wrap a single image in a list"),
    ],
)
def test_bad_images_are_refused_with_the_reason(encoder, images, message) -> None:
    with pytest.raises(ValueError, match=message):
        encoder.embed_images(images)


def test_bad_texts_are_refused_with_the_reason(encoder) -> None:
    with pytest.raises(ValueError, match="wrap a single one in a list"):
        encoder.embed_texts("the effusion")
    with pytest.raises(ValueError, match="text 1 is a int"):
        encoder.embed_texts(["ok", 3])
