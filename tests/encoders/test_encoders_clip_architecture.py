"""Our CLIP ViT against independent implementations: torch's MultiheadAttention and transformers'
CLIPModel loaded with the same (converted) weights."""

from __future__ import annotations

import pytest
import torch
from encoder_builders import TINY_VOCAB_SIZE, tiny_clip_state_dict

from chexretrieve.encoders.clip_architecture import (
    ClipModel,
    ClipSizeError,
    ResidualBlock,
    infer_clip_sizes,
)


def test_sizes_are_read_from_the_shapes() -> None:
    state = tiny_clip_state_dict(
        vision_width=128, text_width=64, layers=3, patch=8, resolution=40, embed_dim=24,
        context_length=20,
    )  # fmt: skip
    sizes = infer_clip_sizes(state)
    assert sizes.embed_dim == 24
    assert (sizes.image_resolution, sizes.patch_size) == (40, 8)
    assert (sizes.vision_width, sizes.vision_layers, sizes.vision_heads) == (128, 3, 2)
    assert (sizes.text_width, sizes.text_layers, sizes.text_heads) == (64, 3, 1)
    assert (sizes.context_length, sizes.vocab_size) == (20, TINY_VOCAB_SIZE)


def test_size_errors_name_the_problem() -> None:
    state = tiny_clip_state_dict()
    del state["text_projection"]
    with pytest.raises(ClipSizeError, match="missing tensor 'text_projection'"):
        infer_clip_sizes(state)

    state = tiny_clip_state_dict()
    state["visual.positional_embedding"] = torch.zeros(6, 64)
    with pytest.raises(ClipSizeError, match="not 1 \\+ a square number"):
        infer_clip_sizes(state)

    state = {k: v for k, v in tiny_clip_state_dict().items() if ".resblocks.1." not in k}
    state.update({k.replace(".0.", ".2."): v for k, v in state.items() if ".resblocks.0." in k})
    with pytest.raises(ClipSizeError, match="not numbered 0..1"):
        infer_clip_sizes(state)


@pytest.mark.parametrize("causal", [False, True])
def test_residual_block_matches_torch_multihead_attention(causal: bool) -> None:
    torch.manual_seed(3)
    width, heads = 128, 2
    block = ResidualBlock(width, heads).eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.normal_(0, 0.1)
    reference = torch.nn.MultiheadAttention(width, heads, batch_first=True).eval()
    reference.load_state_dict(
        {k.removeprefix("attn."): v for k, v in block.state_dict().items() if k.startswith("attn.")}
    )
    x = torch.randn(3, 7, width)
    mask = torch.triu(torch.full((7, 7), float("-inf")), diagonal=1) if causal else None
    with torch.no_grad():
        h = block.ln_1(x)
        expected = x + reference(h, h, h, attn_mask=mask, need_weights=False)[0]
        hidden = block.mlp.c_fc(block.ln_2(expected))
        expected = expected + block.mlp.c_proj(hidden * torch.sigmoid(1.702 * hidden))
        assert torch.allclose(block(x, causal), expected, atol=1e-5)


def _to_transformers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """OpenAI CLIP key layout -> transformers CLIPModel key layout (split q/k/v, transposed
    projections)."""
    out: dict[str, torch.Tensor] = {}
    renames = {
        "ln_1": "layer_norm1", "ln_2": "layer_norm2", "mlp.c_fc": "mlp.fc1",
        "mlp.c_proj": "mlp.fc2", "attn.out_proj": "self_attn.out_proj",
    }  # fmt: skip
    for key, value in state.items():
        for prefix, tower in (("visual.transformer.resblocks.", "vision_model"),
                              ("transformer.resblocks.", "text_model")):  # fmt: skip
            if key.startswith(prefix):
                index, rest = key[len(prefix) :].split(".", 1)
                base = f"{tower}.encoder.layers.{index}."
                if rest.startswith("attn.in_proj_"):
                    kind = rest.removeprefix("attn.in_proj_")
                    for name, part in zip("qkv", value.chunk(3), strict=True):
                        out[f"{base}self_attn.{name}_proj.{kind}"] = part
                else:
                    module, param = rest.rsplit(".", 1)
                    out[f"{base}{renames[module]}.{param}"] = value
                break
        else:
            fixed = {
                "visual.conv1.weight": "vision_model.embeddings.patch_embedding.weight",
                "visual.class_embedding": "vision_model.embeddings.class_embedding",
                "visual.positional_embedding": "vision_model.embeddings.position_embedding.weight",
                "visual.ln_pre.weight": "vision_model.pre_layrnorm.weight",
                "visual.ln_pre.bias": "vision_model.pre_layrnorm.bias",
                "visual.ln_post.weight": "vision_model.post_layernorm.weight",
                "visual.ln_post.bias": "vision_model.post_layernorm.bias",
                "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
                "positional_embedding": "text_model.embeddings.position_embedding.weight",
                "ln_final.weight": "text_model.final_layer_norm.weight",
                "ln_final.bias": "text_model.final_layer_norm.bias",
                "logit_scale": "logit_scale",
            }
            if key == "visual.proj":
                out["visual_projection.weight"] = value.T.contiguous()
            elif key == "text_projection":
                out["text_projection.weight"] = value.T.contiguous()
            else:
                out[fixed[key]] = value
    return out


def test_whole_model_matches_transformers_clip() -> None:
    from transformers import CLIPConfig, CLIPModel

    state = tiny_clip_state_dict(seed=5, vision_width=128, text_width=128, context_length=16)
    ours = ClipModel(infer_clip_sizes(state)).eval()
    ours.load_state_dict(state)
    end_id = TINY_VOCAB_SIZE - 1
    config = CLIPConfig(
        text_config=dict(
            vocab_size=TINY_VOCAB_SIZE, hidden_size=128, intermediate_size=512,
            num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=16,
            hidden_act="quick_gelu", bos_token_id=end_id - 1, eos_token_id=end_id, pad_token_id=0,
        ),
        vision_config=dict(
            hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2,
            image_size=32, patch_size=16, hidden_act="quick_gelu",
        ),
        projection_dim=32,
    )  # fmt: skip
    reference = CLIPModel(config).eval()
    missing, unexpected = reference.load_state_dict(_to_transformers(state), strict=False)
    assert not unexpected
    assert all("position_ids" in name for name in missing), missing

    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(4, 3, 32, 32, generator=generator)
    ids = torch.randint(1, 500, (3, 9), generator=generator)
    ids[:, 0] = end_id - 1
    ends = torch.tensor([8, 4, 6])
    ids[torch.arange(3), ends] = end_id
    ids[1, 5:] = 0  # padding after the end token
    ids[2, 7:] = 0
    with torch.no_grad():
        expected_images = reference.get_image_features(pixel_values=pixels)
        expected_texts = reference.get_text_features(input_ids=ids)
        images, texts = ours.encode_image(pixels), ours.encode_text(ids, ends)
    if not isinstance(expected_images, torch.Tensor):  # transformers >= 5 returns an output object
        expected_images, expected_texts = (
            expected_images.pooler_output,
            expected_texts.pooler_output,
        )
    assert torch.allclose(images, expected_images, atol=1e-5)
    assert torch.allclose(texts, expected_texts, atol=1e-5)
    assert ours.logit_scale.item() == pytest.approx(reference.logit_scale.item())


def test_text_padding_after_the_end_token_changes_nothing() -> None:
    state = tiny_clip_state_dict(seed=2)
    model = ClipModel(infer_clip_sizes(state)).eval()
    model.load_state_dict(state)
    ids = torch.tensor([[522, 100, 200, 523]])
    padded = torch.cat([ids, torch.full((1, 30), 7)], dim=1)
    with torch.no_grad():
        short = model.encode_text(ids, torch.tensor([3]))
        long = model.encode_text(padded, torch.tensor([3]))
    assert torch.allclose(short, long, atol=1e-6)


def test_vit_b_32_has_clips_parameter_count() -> None:
    """OpenAI's ViT-B/32 (CheXzero's architecture) has 151,277,313 parameters; built on the meta
    device, so nothing is allocated."""
    from chexretrieve.encoders.clip_architecture import ClipSizes

    sizes = ClipSizes(
        embed_dim=512, image_resolution=224, patch_size=32, vision_width=768, vision_layers=12,
        vision_heads=12, context_length=77, vocab_size=49408, text_width=512, text_layers=12,
        text_heads=8,
    )  # fmt: skip
    with torch.device("meta"):
        model = ClipModel(sizes)
    assert sum(p.numel() for p in model.parameters()) == 151_277_313
    assert infer_clip_sizes(model.state_dict()) == sizes
