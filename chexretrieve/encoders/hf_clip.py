"""Image-text models saved as Hugging Face folders: CLIP, MetaCLIP 2, SigLIP and SigLIP 2.

The folder holds ``config.json``, the weights (``model.safetensors`` or ``pytorch_model.bin``, maybe
sharded), the image processor's ``preprocessor_config.json`` and the tokenizer files, as written by
``save_pretrained``. Everything is read with ``local_files_only=True``: nothing is downloaded.
Greyscale images in [0, 1] become 8-bit RGB images (the grey value in all three channels) and go
through the folder's own image processor; ``embed_rgb_images`` takes colour images (natural-image
evaluation) through the same path.

The two families differ in how text goes in (each as its authors run it):

- CLIP-like: padded to the longest sentence with an attention mask, pooled at the end token;
- SigLIP / SigLIP 2 (``model_type`` siglip, siglip2): padded to ``max_length`` (the text tower's
  positions, 64) *without* an attention mask, pooled at the last position, as the models were
  trained. Their ``logit_scale`` (not clamped to 100 as CLIP's) is the inverse temperature;
  ``logit_bias`` is recorded on the encoder."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from chexretrieve.encoders.base import (
    EncoderError,
    check_greyscale_images,
    check_rgb_images,
    check_texts,
    from_transformers,
    unit_rows,
)
from chexretrieve.encoders.checkpoint import hash_files
from chexretrieve.encoders.config import EncoderConfig
from chexretrieve.encoders.device import inference_context, resolve_batch_size, select_device

#: weight file patterns save_pretrained writes (single or sharded)
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
#: model types trained with the sigmoid loss (max_length text padding, no mask, logit bias)
SIGMOID_MODEL_TYPES = ("siglip", "siglip2")


def embedding_size(config) -> int:  # noqa: ANN001
    """Length of the joint embedding: CLIP's ``projection_dim``, else SigLIP's text head size."""
    projection = getattr(config, "projection_dim", None)
    if projection is not None:
        return int(projection)
    text_config = getattr(config, "text_config", None)
    size = getattr(text_config, "projection_size", None) or getattr(
        text_config, "hidden_size", None
    )
    if size is None:
        raise EncoderError(
            f"{type(config).__name__} names no projection_dim or text hidden_size; only "
            "CLIP-family and SigLIP-family image-text models are supported"
        )
    return int(size)


def greyscale_to_rgb(image: np.ndarray):
    """A PIL RGB image with the grey value (rounded to 8 bits) in all three channels."""
    grey = np.asarray(image, dtype=np.float32)
    return rgb_to_pil(np.repeat(grey[:, :, None], 3, axis=2))


def rgb_to_pil(image: np.ndarray):
    """A PIL RGB image of a (rows, columns, 3) float image in [0, 1], rounded to 8 bits."""
    from PIL import Image

    return Image.fromarray(np.rint(np.asarray(image, np.float32) * 255.0).astype(np.uint8), "RGB")


def _pooled(output: object) -> torch.Tensor:
    """Projected features: older transformers give a tensor, newer an output with pooler_output."""
    if isinstance(output, torch.Tensor):
        return output
    pooled = getattr(output, "pooler_output", None)
    if isinstance(pooled, torch.Tensor):
        return pooled
    raise EncoderError(f"the model returned {type(output).__name__} without projected features")


class HuggingFaceClipEncoder:
    """An ``Encoder`` over a Hugging Face CLIP-family model folder."""

    def __init__(self, model, image_processor, tokenizer, weights_hash: str, folder: Path, config):
        self.config = config
        self.folder = folder
        self.device = select_device(config.device)
        self.batch_size = resolve_batch_size(config.batch_size, self.device)
        self.model = model.float().eval().requires_grad_(False).to(self.device)
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        model_type = getattr(model.config, "model_type", "clip") or "clip"
        self.encoder_id = f"hf-{model_type}:{weights_hash}"
        self.sigmoid_family = model_type in SIGMOID_MODEL_TYPES
        text_config = getattr(model.config, "text_config", None)
        self.embed_dim = embedding_size(model.config)
        scale = math.exp(float(model.logit_scale.detach()))
        # CLIP's training clamps the scale at 100; SigLIP's does not
        self.inv_temperature = scale if self.sigmoid_family else min(scale, 100.0)
        bias = getattr(model, "logit_bias", None)
        #: SigLIP's learnt logit bias (recorded; the geometries use only the scale), else None
        self.logit_bias = float(bias.detach().reshape(-1)[0]) if bias is not None else None
        positions = getattr(text_config, "max_position_embeddings", config.max_text_tokens)
        self.max_text_tokens = min(config.max_text_tokens, int(positions))

    def __repr__(self) -> str:
        return f"HuggingFaceClipEncoder({self.encoder_id}, {self.folder}, device={self.device})"

    def embed_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Unit embeddings of 2-D greyscale images in [0, 1] (radiographs)."""
        return self._embed_pil(
            [greyscale_to_rgb(image) for image in check_greyscale_images(images)]
        )

    def embed_rgb_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Unit embeddings of (rows, columns, 3) colour images in [0, 1] (natural images)."""
        return self._embed_pil([rgb_to_pil(image) for image in check_rgb_images(images)])

    def _embed_pil(self, images: list) -> np.ndarray:
        out = np.zeros((len(images), self.embed_dim), dtype=np.float32)
        for start in range(0, len(images), self.batch_size):
            chunk = images[start : start + self.batch_size]
            # pixel_values, and for SigLIP 2 also pixel_attention_mask and spatial_shapes
            inputs = self.image_processor(images=chunk, return_tensors="pt")
            inputs = {name: value.to(self.device) for name, value in inputs.items()}
            with inference_context(
                self.device, self.config.use_autocast, self.config.autocast_dtype
            ):
                features = _pooled(self.model.get_image_features(**inputs))
            out[start : start + len(chunk)] = unit_rows(features.float().cpu().numpy())
        return out

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self.embed_dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            tokens = self.tokenizer(
                chunk,
                padding="max_length" if self.sigmoid_family else True,
                truncation=True,
                max_length=self.max_text_tokens,
                return_tensors="pt",
            )
            # SigLIP was trained on max_length padding without a mask: passing one changes results
            names = ("input_ids",) if self.sigmoid_family else ("input_ids", "attention_mask")
            inputs = {name: tokens[name].to(self.device) for name in names if name in tokens}
            with inference_context(
                self.device, self.config.use_autocast, self.config.autocast_dtype
            ):
                features = _pooled(self.model.get_text_features(**inputs))
            out[start : start + len(chunk)] = unit_rows(features.float().cpu().numpy())
        return out


def load_hf_clip_encoder(
    folder: Path | str, config: EncoderConfig | None = None
) -> HuggingFaceClipEncoder:
    """An encoder from a ``save_pretrained`` folder, read with ``local_files_only=True``."""
    config = config or EncoderConfig()
    folder = Path(folder)
    if not folder.is_dir():
        raise EncoderError(
            f"Hugging Face model folder {folder} does not exist; pass a local folder written by "
            "save_pretrained (hub names are not downloaded)"
        )
    if not (folder / "config.json").is_file():
        raise EncoderError(f"Hugging Face model folder {folder} has no config.json")
    weight_files = sorted({p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern)})
    if not weight_files:
        raise EncoderError(
            f"Hugging Face model folder {folder} has no weights (model.safetensors or "
            "pytorch_model.bin)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    auto_image_processor, auto_model, auto_tokenizer = from_transformers(
        "AutoImageProcessor", "AutoModel", "AutoTokenizer"
    )
    try:
        model = auto_model.from_pretrained(folder, local_files_only=True)
        image_processor = auto_image_processor.from_pretrained(folder, local_files_only=True)
        tokenizer = auto_tokenizer.from_pretrained(folder, local_files_only=True)
    # transformers and safetensors raise many types (OSError, ValueError, SafetensorError, ...)
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise EncoderError(
            f"Hugging Face model folder {folder} cannot be loaded: {first_line}"
        ) from error
    for needed in ("get_image_features", "get_text_features", "logit_scale"):
        if not hasattr(model, needed):
            raise EncoderError(
                f"Hugging Face model folder {folder} holds a {type(model).__name__}, which has no "
                f"{needed}; only CLIP-family and SigLIP-family image-text models are supported"
            )
    return HuggingFaceClipEncoder(
        model, image_processor, tokenizer, hash_files(weight_files), folder, config
    )
