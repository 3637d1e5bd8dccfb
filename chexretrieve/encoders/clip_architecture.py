"""The OpenAI CLIP vision-transformer architecture (CheXzero's model), built from a state dict.

Parameter names follow OpenAI CLIP's (and CheXzero's) layout exactly, so a checkpoint loads with
``load_state_dict``: ``visual.conv1.weight``, ``visual.class_embedding``,
``visual.transformer.resblocks.0.attn.in_proj_weight``, ``transformer.resblocks.0.mlp.c_fc.weight``,
``token_embedding.weight``, ``text_projection``, ``logit_scale``, ... Every size is read from the
tensor shapes; attention heads are width // 64, OpenAI's rule for its ViT models.

Both towers are pre-LayerNorm transformers with QuickGELU MLPs. The image tower embeds 2-D patches
with a strided convolution, prepends a class token and projects the class token's final state. The
text tower uses causal attention and projects the state at each sentence's end token.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

#: width of one attention head in OpenAI's CLIP ViT models
HEAD_WIDTH = 64
#: integer metadata some OpenAI state dicts carry beside the weights; not parameters
METADATA_KEYS = ("input_resolution", "context_length", "vocab_size")


@dataclass(frozen=True)
class ClipSizes:
    """Every size of a CLIP ViT model, as read from its state dict."""

    embed_dim: int  # joint embedding length
    image_resolution: int  # input side in pixels
    patch_size: int  # side of one square patch
    vision_width: int  # image transformer width
    vision_layers: int  # image transformer blocks
    vision_heads: int  # image attention heads
    context_length: int  # most text tokens
    vocab_size: int  # token embedding rows
    text_width: int  # text transformer width
    text_layers: int  # text transformer blocks
    text_heads: int  # text attention heads


class ClipSizeError(ValueError):
    """The state dict lacks a tensor the sizes are read from, or its shapes do not fit together."""


def _count_blocks(keys: list[str], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    indices = {int(m.group(1)) for key in keys if (m := pattern.match(key))}
    if not indices:
        raise ClipSizeError(f"no transformer blocks '{prefix}N...' found")
    if indices != set(range(len(indices))):
        raise ClipSizeError(
            f"transformer blocks '{prefix}N' are not numbered 0..{len(indices) - 1}"
        )
    return len(indices)


def _heads(width: int, tower: str) -> int:
    heads = max(1, width // HEAD_WIDTH)
    if width % heads:
        raise ClipSizeError(f"{tower} width {width} cannot be split into {heads} attention heads")
    return heads


def infer_clip_sizes(state: dict[str, torch.Tensor]) -> ClipSizes:
    """Read every size from the tensor shapes; ClipSizeError when something needed is missing."""

    def shape(key: str, ndim: int) -> tuple[int, ...]:
        if key not in state:
            if key == "visual.conv1.weight" and any(k.startswith("visual.layer1.") for k in state):
                raise ClipSizeError(
                    "this is a ResNet CLIP checkpoint; only vision-transformer (ViT) CLIP is "
                    "supported"
                )
            raise ClipSizeError(f"missing tensor '{key}', which every CLIP ViT state dict has")
        value = state[key]
        if not isinstance(value, torch.Tensor) or value.ndim != ndim:
            found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ClipSizeError(f"'{key}' should be a {ndim}-D tensor, found {found}")
        return tuple(value.shape)

    keys = list(state)
    vision_width, _, patch, patch_w = shape("visual.conv1.weight", 4)
    if patch != patch_w:
        raise ClipSizeError(f"visual.conv1.weight has non-square patches {patch}x{patch_w}")
    positions = shape("visual.positional_embedding", 2)[0]
    grid = math.isqrt(positions - 1)
    if grid * grid != positions - 1:
        raise ClipSizeError(
            f"visual.positional_embedding has {positions} rows, not 1 + a square number of patches"
        )
    context_length = shape("positional_embedding", 2)[0]
    vocab_size = shape("token_embedding.weight", 2)[0]
    text_width = shape("ln_final.weight", 1)[0]
    embed_dim = shape("text_projection", 2)[1]
    return ClipSizes(
        embed_dim=embed_dim,
        image_resolution=patch * grid,
        patch_size=patch,
        vision_width=vision_width,
        vision_layers=_count_blocks(keys, "visual.transformer.resblocks."),
        vision_heads=_heads(vision_width, "vision"),
        context_length=context_length,
        vocab_size=vocab_size,
        text_width=text_width,
        text_layers=_count_blocks(keys, "transformer.resblocks."),
        text_heads=_heads(text_width, "text"),
    )


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x), the GELU approximation CLIP was trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class SelfAttention(nn.Module):
    """Multi-head self-attention, one packed q/k/v projection (torch MultiheadAttention names)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width))
        self.out_proj = nn.Linear(width, width)
        nn.init.normal_(self.in_proj_weight, std=width**-0.5)

    def forward(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        batch, length, width = x.shape
        packed = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        # (batch, length, 3 * width) -> 3 x (batch, heads, length, head width)
        q, k, v = packed.view(batch, length, 3, self.heads, width // self.heads).permute(
            2, 0, 3, 1, 4
        )
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out_proj(mixed.transpose(1, 2).reshape(batch, length, width))


class Mlp(nn.Module):
    """Linear -> QuickGELU -> Linear, named c_fc / c_proj as in CLIP."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.c_fc = nn.Linear(width, hidden)
        self.gelu = QuickGELU()
        self.c_proj = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class ResidualBlock(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = Mlp(width, 4 * width)

    def forward(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """A stack of residual blocks (batch-first tensors)."""

    def __init__(self, width: int, layers: int, heads: int):
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualBlock(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x, causal)
        return x


class VisionTower(nn.Module):
    """Patch embedding, class token, positions, transformer, LayerNorm and projection."""

    def __init__(self, sizes: ClipSizes):
        super().__init__()
        width, patch = sizes.vision_width, sizes.patch_size
        grid = sizes.image_resolution // patch
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(width) * width**-0.5)
        self.positional_embedding = nn.Parameter(torch.randn(grid * grid + 1, width) * width**-0.5)
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, sizes.vision_layers, sizes.vision_heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(torch.randn(width, sizes.embed_dim) * width**-0.5)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        patches = self.conv1(pixels).flatten(2).transpose(1, 2)  # (batch, grid^2, width)
        cls = self.class_embedding.to(patches.dtype).expand(patches.shape[0], 1, -1)
        x = torch.cat([cls, patches], dim=1) + self.positional_embedding.to(patches.dtype)
        x = self.transformer(self.ln_pre(x))
        return self.ln_post(x[:, 0]) @ self.proj


class ClipModel(nn.Module):
    """OpenAI CLIP with a ViT image tower; attribute names match the checkpoint keys."""

    def __init__(self, sizes: ClipSizes):
        super().__init__()
        self.sizes = sizes
        width = sizes.text_width
        self.visual = VisionTower(sizes)
        self.transformer = Transformer(width, sizes.text_layers, sizes.text_heads)
        self.token_embedding = nn.Embedding(sizes.vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.randn(sizes.context_length, width) * 0.01)
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.randn(width, sizes.embed_dim) * width**-0.5)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """(batch, 3, R, R) normalised pixels -> (batch, embed_dim) unnormalised embeddings."""
        return self.visual(pixels)

    def encode_text(self, ids: torch.Tensor, end_positions: torch.Tensor) -> torch.Tensor:
        """(batch, length) token ids, (batch,) end-token positions -> (batch, embed_dim).

        Attention is causal, so padding after the end token never changes the result and ``length``
        may be anything up to the context length.
        """
        x = self.token_embedding(ids) + self.positional_embedding[: ids.shape[1]]
        x = self.ln_final(self.transformer(x, causal=True))
        ends = x[torch.arange(x.shape[0], device=x.device), end_positions]
        return ends @ self.text_projection
