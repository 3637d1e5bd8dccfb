"""SigLIP / SigLIP 2 folders through ``hf-clip:``: embeddings equal transformers' own
``get_image_features`` / ``get_text_features`` run as the model card runs them (text padded to
``max_length`` without an attention mask), temperature and bias read from the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from encoder_builders import write_hf_siglip_folder

from chexretrieve.encoders import load_encoder
from chexretrieve.encoders.hf_clip import greyscale_to_rgb

TEXTS = ["the effusion", "no pleural effusion.", "", "pleural " * 80, "Café ≥ 5 µm"]
TOLERANCE = 1e-5


def _images() -> list[np.ndarray]:
    rng = np.random.default_rng(8)
    return [rng.random(shape, dtype=np.float32) for shape in [(50, 40), (32, 32), (20, 90)]]


def _unit(features) -> np.ndarray:
    features = getattr(features, "pooler_output", features).detach().numpy().astype(np.float64)
    return features / np.linalg.norm(features, axis=1, keepdims=True)


def _relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.linalg.norm(ours - reference, axis=1)))  # both unit rows


def _reference(folder):
    import transformers

    model = transformers.AutoModel.from_pretrained(folder, local_files_only=True).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(folder, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model, processor, tokenizer


@pytest.mark.parametrize("model_type", ["siglip", "siglip2"])
def test_siglip_folders_equal_transformers(model_type, tmp_path, tokenizer_folder) -> None:
    folder = write_hf_siglip_folder(tmp_path / model_type, tokenizer_folder, model_type)
    encoder = load_encoder(f"hf-clip:{folder}", "cpu")
    model, processor, tokenizer = _reference(folder)
    assert encoder.encoder_id.startswith(f"hf-{model_type}:")
    assert encoder.embed_dim == 32 and encoder.max_text_tokens == 64
    assert encoder.inv_temperature == pytest.approx(12.5, rel=1e-6)  # exp(logit_scale)
    assert encoder.logit_bias == pytest.approx(-3.0)

    with torch.no_grad():
        inputs = processor(images=[greyscale_to_rgb(i) for i in _images()], return_tensors="pt")
        image_reference = _unit(model.get_image_features(**inputs))
        tokens = tokenizer(
            TEXTS, padding="max_length", max_length=64, truncation=True, return_tensors="pt"
        )
        text_reference = _unit(model.get_text_features(input_ids=tokens["input_ids"]))
        masked = _unit(model.get_text_features(**tokens))
    assert _relative_error(encoder.embed_images(_images()), image_reference) <= TOLERANCE
    assert _relative_error(encoder.embed_texts(TEXTS), text_reference) <= TOLERANCE
    # with a mask (as CLIP is run) the short sentences would come out differently
    assert _relative_error(masked, text_reference) > 1e-3
