"""Tiny models and tokenizers for the encoder tests, built from scratch with fixed seeds.

The CheXzero-style state dict is written out key by key in OpenAI CLIP's layout (not taken from our
model), so loading it checks that our parameter names match CheXzero's checkpoints.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import torch

#: a handful of merges: enough that common words in the tests merge into multi-byte tokens
TINY_MERGES = [
    ("t", "h"),
    ("th", "e</w>"),
    ("e", "f"),
    ("ef", "f"),
    ("o", "n</w>"),
    ("i", "on</w>"),
    ("a", "r"),
    ("p", "l"),
    ("n", "o</w>"),
    ("l", "e</w>"),
]


#: >= 50 varied clinical sentences: punctuation, digits, units, unicode, HTML, long, empty
VARIED_SENTENCES = [
    "",
    " ",
    "No pleural effusion.",
    "no acute cardiopulmonary process",
    "The heart size is normal. The mediastinal contour is within normal limits.",
    "Small left pleural effusion with adjacent atelectasis.",
    "Moderate-to-severe pulmonary edema; cardiomegaly (CTR ~0.62).",
    "ET tube tip 4.5 cm above the carina.",
    "NG tube courses below the diaphragm, tip not visualized!!!",
    "Right PICC terminates in the lower SVC/cavoatrial junction.",
    "Interval increase in R>L bibasilar opacities, c/w aspiration vs. pneumonia?",
    "There is no pneumothorax; there's no focal consolidation.",
    "Patient's lungs are clear. They're well expanded, we've compared, I'm sure, it'll do.",
    "Nodule measuring 8 mm (previously 6mm) in the RUL.",
    "Dose: 2.5 µSv; lesion ≥ 10 mm and ≤ 3 cm; SpO₂ 94 %.",
    "Temperature 38.5°C, HR 110 bpm, BP 90/60 mmHg.",
    "“Curly quotes” and ‘single ones’ — with an em dash – and en dash.",
    "ﬁbrosis and ﬂuid: ligatures ﬀ ﬃ ﬄ",
    "ＦＵＬＬ-ＷＩＤＴＨ ｌｅｔｔｅｒｓ １２３",
    "\ufeffByte-order mark at the start",
    "escaped &amp; HTML &lt;tags&gt; &quot;quoted&quot; &#39;apos&#39;",
    "double escaped &amp;amp; &amp;lt;b&amp;gt;",
    "tabs\tand\nnewlines\r\nand   many    spaces",
    "non\u00a0breaking\u2009thin\u3000ideographic spaces",
    "zero\u200bwidth\u200bspace",
    "Café résumé naïve Ångström Øresund",
    "décomposé: e\u0301 vs é (combining accent)",
    "Pneumothorax Ärzte Übersicht straße",
    "胸部X線: 心拡大なし",
    "Рентгенограмма грудной клетки: без патологии",
    "صورة الصدر طبيعية",
    "emoji 🫁 lungs ❤️ heart 👍🏽",
    "1234567890 3.14159 1e-5 -7 +8 1,000,000",
    "12/25/2024 08:30 AM",
    "C3-C4, T12-L1, L5/S1 levels",
    "Lines/tubes: ETT, OGT, R IJ CVC, L chest tube x2.",
    "!!!???...,,,;;;:::",
    "[brackets] {braces} (parens) <angles>",
    "email@example.com https://example.org/path?q=1&r=2",
    "CAPS LOCK SENTENCE WITH NO PUNCTUATION",
    "MiXeD cAsE iS hErE",
    "a",
    "x-ray",
    "X-RAY",
    "it's IT'S It'S",
    "____underscores____ and ---dashes---",
    "#hashtag @mention $dollar %percent ^caret *star",
    "Backslash \\ and pipe | and tilde ~ and backtick `",
    "mojibake: donâ€™t, cafÃ©",
    "control\x07bell and \x00null",
    "½ ¼ ¾ ² ³ ¹ ° ± × ÷ µ ¶ §",
    "no pleural effusion " * 30,
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 5,
    " ".join(str(n) for n in range(100)),
]


def byte_symbol_list() -> list[str]:
    """The 256 byte symbols written out independently of chexretrieve's own table."""
    printable = (
        list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    )  # '!'..'~', '¡'..'¬', '®'..'ÿ'
    others = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable}
    table.update({b: chr(256 + i) for i, b in enumerate(others)})
    return [table[b] for b in range(256)]


def openai_byte_order() -> list[str]:
    """The 256 byte symbols in OpenAI's vocabulary order (``bytes_to_unicode().values()``):
    printable bytes first, then the others in byte order."""
    table = byte_symbol_list()
    printable = [b for b in range(256) if table[b] == chr(b)]
    return [table[b] for b in printable] + [table[b] for b in range(256) if table[b] != chr(b)]


def tiny_vocab() -> list[str]:
    symbols = openai_byte_order()
    return (
        symbols
        + [s + "</w>" for s in symbols]
        + [a + b for a, b in TINY_MERGES]
        + ["<|startoftext|>", "<|endoftext|>"]
    )


def write_tokenizer_folder(folder: Path) -> Path:
    """A Hugging Face CLIP tokenizer folder: vocab.json + merges.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(tiny_vocab())}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in TINY_MERGES]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def write_openai_merges(path: Path) -> Path:
    """The same tokenizer in OpenAI's bpe_simple_vocab .txt.gz format."""
    lines = ['"bpe_simple_vocab_16e6.txt#version: 0.2'] + [f"{a} {b}" for a, b in TINY_MERGES]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


TINY_VOCAB_SIZE = 512 + len(TINY_MERGES) + 2


def tiny_clip_state_dict(
    seed: int = 0,
    vision_width: int = 64,
    text_width: int = 64,
    layers: int = 2,
    patch: int = 16,
    resolution: int = 32,
    embed_dim: int = 32,
    context_length: int = 77,
    vocab_size: int = TINY_VOCAB_SIZE,
    logit_scale: float = math.log(1 / 0.07),
) -> dict[str, torch.Tensor]:
    """A random CLIP ViT state dict in OpenAI / CheXzero key layout."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 0.05) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * scale

    def norm(prefix: str, width: int) -> dict[str, torch.Tensor]:
        return {f"{prefix}.weight": 1 + rand(width, scale=0.1), f"{prefix}.bias": rand(width)}

    def block(prefix: str, width: int) -> dict[str, torch.Tensor]:
        out = {
            f"{prefix}.attn.in_proj_weight": rand(3 * width, width, scale=width**-0.5),
            f"{prefix}.attn.in_proj_bias": rand(3 * width),
            f"{prefix}.attn.out_proj.weight": rand(width, width, scale=width**-0.5),
            f"{prefix}.attn.out_proj.bias": rand(width),
            f"{prefix}.mlp.c_fc.weight": rand(4 * width, width, scale=width**-0.5),
            f"{prefix}.mlp.c_fc.bias": rand(4 * width),
            f"{prefix}.mlp.c_proj.weight": rand(width, 4 * width, scale=(4 * width) ** -0.5),
            f"{prefix}.mlp.c_proj.bias": rand(width),
        }
        out.update(norm(f"{prefix}.ln_1", width))
        out.update(norm(f"{prefix}.ln_2", width))
        return out

    grid = resolution // patch
    state = {
        "visual.conv1.weight": rand(vision_width, 3, patch, patch, scale=0.1),
        "visual.class_embedding": rand(vision_width, scale=0.5),
        "visual.positional_embedding": rand(grid * grid + 1, vision_width, scale=0.5),
        "visual.proj": rand(vision_width, embed_dim, scale=vision_width**-0.5),
        "token_embedding.weight": rand(vocab_size, text_width, scale=0.5),
        "positional_embedding": rand(context_length, text_width, scale=0.1),
        "text_projection": rand(text_width, embed_dim, scale=text_width**-0.5),
        "logit_scale": torch.tensor(logit_scale),
    }
    state.update(norm("visual.ln_pre", vision_width))
    state.update(norm("visual.ln_post", vision_width))
    state.update(norm("ln_final", text_width))
    for i in range(layers):
        state.update(block(f"visual.transformer.resblocks.{i}", vision_width))
        state.update(block(f"transformer.resblocks.{i}", text_width))
    return state


def write_hf_clip_folder(
    folder: Path,
    tokenizer_folder: Path,
    model_type: str = "clip",
    projection_dim: int = 16,
    layers: int = 2,
    seed: int = 0,
) -> Path:
    """A tiny random CLIPModel (or MetaClip2Model) with tokenizer and image processor, saved with
    save_pretrained."""
    import transformers

    if model_type == "clip":
        config_class, model_class = transformers.CLIPConfig, transformers.CLIPModel
    else:
        config_class, model_class = transformers.MetaClip2Config, transformers.MetaClip2Model
    config = config_class(
        text_config=dict(
            vocab_size=TINY_VOCAB_SIZE, hidden_size=32, intermediate_size=64,
            num_hidden_layers=layers, num_attention_heads=2, max_position_embeddings=40,
            bos_token_id=TINY_VOCAB_SIZE - 2, eos_token_id=TINY_VOCAB_SIZE - 1,
            pad_token_id=TINY_VOCAB_SIZE - 1,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=2,
            image_size=32, patch_size=8,
        ),
        projection_dim=projection_dim,
        logit_scale_init_value=math.log(20.0),
    )  # fmt: skip
    torch.manual_seed(seed)
    model_class(config).save_pretrained(folder)
    tokenizer = transformers.CLIPTokenizer.from_pretrained(tokenizer_folder, local_files_only=True)
    tokenizer.save_pretrained(folder)
    transformers.CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(folder)
    return folder


def write_hf_siglip_folder(
    folder: Path, tokenizer_folder: Path, model_type: str = "siglip", seed: int = 0
) -> Path:
    """A tiny random SiglipModel (or Siglip2Model) with a tokenizer and its image processor, saved
    with save_pretrained (the tokenizer is the tiny CLIP one: the text path under test is the
    model's padding, mask and pooling, not the vocabulary)."""
    import transformers

    if model_type == "siglip":
        config_class, model_class = transformers.SiglipConfig, transformers.SiglipModel
        processor = transformers.SiglipImageProcessor(size={"height": 32, "width": 32})
        vision = dict(image_size=32)
    else:
        config_class, model_class = transformers.Siglip2Config, transformers.Siglip2Model
        processor = transformers.Siglip2ImageProcessor(patch_size=8, max_num_patches=16)
        vision = dict(num_patches=16)
    config = config_class(
        text_config=dict(
            vocab_size=TINY_VOCAB_SIZE, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64,
            bos_token_id=TINY_VOCAB_SIZE - 2, eos_token_id=TINY_VOCAB_SIZE - 1,
            pad_token_id=TINY_VOCAB_SIZE - 1,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            patch_size=8, **vision,
        ),
    )  # fmt: skip
    torch.manual_seed(seed)
    model = model_class(config)
    with torch.no_grad():  # a learnt-looking temperature and bias instead of the initial ones
        model.logit_scale.fill_(math.log(12.5))
        model.logit_bias.fill_(-3.0)
    model.save_pretrained(folder)
    tokenizer = transformers.CLIPTokenizer.from_pretrained(tokenizer_folder, local_files_only=True)
    tokenizer.model_max_length = 64
    tokenizer.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
