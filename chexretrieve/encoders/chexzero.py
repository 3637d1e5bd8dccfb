"""CheXzero: OpenAI CLIP ViT-B/32 fine-tuned on MIMIC-CXR, run by our own CLIP implementation.

CheXzero's checkpoints are plain state dicts in OpenAI CLIP's key layout; ``load_chexzero_encoder``
reads one, builds the model from its shapes and returns an ``Encoder``. Its image preprocessing
(``preprocess_chexzero``) follows CheXzero's:

1. pixel values in [0, 1] rounded to 8 bits (CheXzero was trained on 8-bit JPEGs);
2. long side resized to 320 (PIL's 8-bit Lanczos, the filter once called ANTIALIAS; sides
   computed as ``int(n * (320 / long))``, which gives 319 for some long sides) and centred on a
   zero-padded 320 x 320 square;
3. normalised with mean 101.48761 and std 83.43944 on that 0-255 scale;
4. resized to the model's input side (224) by bicubic interpolation without antialiasing (as the
   torchvision of CheXzero's release resized tensors);
5. the one channel repeated three times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from chexretrieve.encoders.base import (
    EncoderError,
    check_greyscale_images,
    check_texts,
    embed_through_preprocessor,
    unit_rows,
)
from chexretrieve.encoders.batching import embed_stack, image_batch_size
from chexretrieve.encoders.checkpoint import load_matching_state_dict, read_checkpoint
from chexretrieve.encoders.clip_architecture import (
    METADATA_KEYS,
    ClipModel,
    ClipSizeError,
    infer_clip_sizes,
)
from chexretrieve.encoders.config import EncoderConfig
from chexretrieve.encoders.device import inference_context, resolve_batch_size, select_device
from chexretrieve.encoders.tokenizer import ClipBpeTokenizer, load_clip_tokenizer

#: side of the zero-padded square CheXzero's images are stored at
PAD_SIDE = 320
#: CheXzero's normalisation, on the 0-255 pixel scale
PIXEL_MEAN = 101.48761
PIXEL_STD = 83.43944


#: Lanczos from a box-reduced image to CheXzero's canvas starts from at least this many times the
#: canvas side (Pillow's "reducing gap"; tests/encoders/test_encoders_working.py bounds the error)
WORKING_GAP = 1.5


def pad_to_square(
    image: np.ndarray,
    side: int = PAD_SIDE,
    *,
    source_shape: tuple[int, int] | None = None,
    scale: int = 1,
) -> np.ndarray:
    """8-bit ``side`` x ``side`` canvas: long side resized to about ``side`` (Lanczos), centred on
    zeros.

    ``image`` is a 2-D uint8 array. Each side n becomes ``int(n * (side / long))`` in floats,
    exactly as CheXzero's ``preprocess`` computes it, so the long side is sometimes ``side - 1``
    (319 for 581, 1077 or 2139 pixels); a side that would become 0 is kept at 1 (CheXzero fails
    there). The image sits at offset ((side - width) // 2, (side - height) // 2).

    ``source_shape`` and ``scale``: ``image`` was box-reduced ``scale`` times from an image of
    ``source_shape`` (ingest's working resolution); the sizes follow the source, and the Lanczos
    filter maps exactly the source's extent (Pillow's reducing-gap resize), within
    tests/encoders/test_encoders_working.py's tolerance of the full-resolution canvas.
    """
    height, width = image.shape if source_shape is None else source_shape
    ratio = float(side) / max(height, width)
    new_height = max(1, int(height * ratio))
    new_width = max(1, int(width * ratio))
    box = None if scale == 1 else (0.0, 0.0, width / scale, height / scale)
    resized = Image.fromarray(image).resize(
        (new_width, new_height), Image.Resampling.LANCZOS, box=box
    )
    square = np.zeros((side, side), dtype=np.uint8)
    top, left = (side - new_height) // 2, (side - new_width) // 2
    square[top : top + new_height, left : left + new_width] = np.asarray(resized)
    return square


def preprocess_chexzero(image: np.ndarray, resolution: int = 224) -> torch.Tensor:
    """(3, resolution, resolution) float32 model input for one greyscale image in [0, 1]."""
    (image,) = check_greyscale_images([image])
    return _preprocess_checked(image, resolution)


def _preprocess_checked(
    image: np.ndarray,
    resolution: int,
    source_shape: tuple[int, int] | None = None,
    scale: int = 1,
) -> torch.Tensor:
    grey = np.rint(image * 255.0).astype(np.uint8)
    canvas = pad_to_square(grey, source_shape=source_shape, scale=scale)
    square = torch.from_numpy(canvas.astype(np.float32))
    normalised = (square - PIXEL_MEAN) / PIXEL_STD
    resized = F.interpolate(
        normalised[None, None],
        size=(resolution, resolution),
        mode="bicubic",
        align_corners=False,
        antialias=False,
    )
    return resized[0].expand(3, -1, -1).contiguous()


@dataclass(frozen=True)
class ChexzeroPreprocess:
    """CheXzero's model input for one greyscale image in [0, 1] (picklable: ingest workers)."""

    resolution: int  # side of the square model input

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return preprocess_chexzero(image, self.resolution).numpy()

    def checked(self, image: np.ndarray) -> np.ndarray:
        """The same for an image already checked by ``check_greyscale_images``."""
        return _preprocess_checked(image, self.resolution).numpy()

    @property
    def working_side(self) -> int:
        """Long side an image may be box-reduced to before this preprocessing (ingest)."""
        return math.ceil(WORKING_GAP * PAD_SIDE)

    def from_working(
        self, image: np.ndarray, source_shape: tuple[int, int], scale: int
    ) -> np.ndarray:
        """The model input of an image box-reduced ``scale`` times from ``source_shape``."""
        (image,) = check_greyscale_images([image])
        return _preprocess_checked(image, self.resolution, tuple(source_shape), scale).numpy()


class ChexzeroEncoder:
    """An ``Encoder`` over one CheXzero (OpenAI CLIP ViT) checkpoint."""

    def __init__(
        self,
        model: ClipModel,
        weights_hash: str,
        config: EncoderConfig,
        checkpoint: Path,
        tokenizer: ClipBpeTokenizer | None = None,
    ):
        self.config = config
        self.checkpoint = checkpoint
        self.sizes = model.sizes
        self.device = select_device(config.device)
        self.batch_size = resolve_batch_size(config.batch_size, self.device)
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.tokenizer = tokenizer
        self.encoder_id = f"chexzero:{weights_hash}"
        self.embed_dim = model.sizes.embed_dim
        self.inv_temperature = min(math.exp(float(model.logit_scale.detach())), 100.0)

    @property
    def text_fingerprint(self) -> str | None:
        """The tokenizer's fingerprint (None without one): text embeddings depend on it as well as
        on the weights that ``encoder_id`` names."""
        return None if self.tokenizer is None else self.tokenizer.fingerprint

    def __repr__(self) -> str:
        return f"ChexzeroEncoder({self.encoder_id}, {self.checkpoint}, device={self.device})"

    def embed_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return embed_through_preprocessor(self, images)

    def image_preprocessor(self) -> ChexzeroPreprocess:
        """One image's model input, (3, side, side) float32 (see ``split_preprocessing``)."""
        return ChexzeroPreprocess(self.sizes.image_resolution)

    def embed_preprocessed(self, inputs: np.ndarray) -> np.ndarray:
        """(n, embed_dim) unit embeddings of a stack of ``image_preprocessor()`` outputs."""
        inputs = np.asarray(inputs, dtype=np.float32)
        side = self.sizes.image_resolution
        if inputs.ndim != 4 or inputs.shape[1:] != (3, side, side):
            raise ValueError(
                f"preprocessed inputs have shape {inputs.shape}, not (n, 3, {side}, {side})"
            )
        model = self.model.encode_image
        return embed_stack(
            model,
            inputs,
            self.device,
            image_batch_size(self, model, inputs.shape[1:]),
            self.config.use_autocast,
            self.config.autocast_dtype,
            self.embed_dim,
        )

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if self.tokenizer is None:
            raise EncoderError(
                f"{self.encoder_id} cannot embed text without CLIP's BPE tokenizer: name "
                "bpe_simple_vocab_16e6.txt.gz (or a folder with vocab.json and merges.txt) in the "
                f"spec (chexzero:{self.checkpoint}?tokenizer=PATH), in $CHEXRETRIEVE_TOKENIZER, "
                "or put it beside the checkpoint"
            )
        max_tokens = min(self.config.max_text_tokens, self.sizes.context_length)
        out = np.zeros((len(texts), self.embed_dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            ids, ends = self.tokenizer.encode_batch(chunk, max_tokens)
            with inference_context(
                self.device, self.config.use_autocast, self.config.autocast_dtype
            ):
                features = self.model.encode_text(
                    torch.from_numpy(ids).to(self.device), torch.from_numpy(ends).to(self.device)
                )
            out[start : start + len(chunk)] = unit_rows(features.float().cpu().numpy())
        return out


def build_clip_model(state: dict[str, torch.Tensor], path: Path) -> ClipModel:
    """Our CLIP model with sizes read from ``state`` and its weights loaded (strictly)."""
    state = {key: value for key, value in state.items() if key not in METADATA_KEYS}
    try:
        sizes = infer_clip_sizes(state)
    except ClipSizeError as error:
        raise EncoderError(f"checkpoint {path} is not a CLIP ViT state dict: {error}") from error
    with torch.device("meta"):  # no random initialisation: every tensor comes from the file
        model = ClipModel(sizes)
    load_matching_state_dict(model, state, path)
    return model


def load_chexzero_encoder(
    checkpoint: Path | str, config: EncoderConfig | None = None
) -> ChexzeroEncoder:
    """A CheXzero encoder from a state-dict file; the tokenizer comes from
    ``config.tokenizer_path`` (without one, only images can be embedded)."""
    config = config or EncoderConfig()
    path = Path(checkpoint)
    state, weights_hash = read_checkpoint(path)
    model = build_clip_model(state, path)
    tokenizer = None
    if config.tokenizer_path is not None:
        tokenizer = load_clip_tokenizer(config.tokenizer_path)
        if tokenizer.vocab_size > model.sizes.vocab_size:
            raise EncoderError(
                f"tokenizer {config.tokenizer_path} has {tokenizer.vocab_size} tokens but "
                f"checkpoint {path} embeds only {model.sizes.vocab_size}; pass the tokenizer the "
                "model was trained with (OpenAI CLIP's bpe_simple_vocab_16e6.txt.gz for CheXzero)"
            )
    return ChexzeroEncoder(model, weights_hash, config, path, tokenizer)
