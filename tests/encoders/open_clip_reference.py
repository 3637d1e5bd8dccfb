"""open_clip's ViT-B-32-quickgelu as the reference for the CheXzero encoder (run as a subprocess).

    python open_clip_reference.py OUT_DIR

Reads OUT_DIR/pixels.npy (model inputs, (n, 3, 224, 224)) and OUT_DIR/texts.json; writes
OUT_DIR/checkpoint.pt (a random-weight ViT-B/32 state dict in OpenAI's key layout, saved the way
CheXzero's training code saves its checkpoints: ``torch.save(model.state_dict(), path)``) and
OUT_DIR/reference.npz (open_clip's token ids, text and image embeddings, unnormalised).

It runs in its own process because open_clip's modules need torchvision, which this project does
not install: ``open_clip/utils.py`` imports ``torchvision.ops.misc.FrozenBatchNorm2d`` (used only
to freeze ResNet batch norms), so a placeholder module that fails when used stands in for it here,
open_clip's package ``__init__`` (which imports its image transforms) is not run, and transformers
is hidden (open_clip imports it only for its optional Hugging Face text towers, and it would see
the placeholder). The model,
transformer, tokenizer and ViT-B-32-quickgelu config are open_clip's own files, unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch


def _import_open_clip_modules():
    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        raise SystemExit("open_clip_torch is not installed (make setup installs it --no-deps)")
    folder = Path(spec.submodule_search_locations[0])

    class FrozenBatchNorm2d:  # never used by a ViT
        def __init__(self, *args, **kwargs):
            raise RuntimeError("torchvision placeholder: FrozenBatchNorm2d is not available")

    sys.modules["transformers"] = None  # open_clip's optional HF text towers: not needed, not seen
    for name in ("torchvision", "torchvision.ops", "torchvision.ops.misc"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["torchvision.ops.misc"].FrozenBatchNorm2d = FrozenBatchNorm2d
    package = types.ModuleType("open_clip")
    package.__path__ = [str(folder)]
    sys.modules["open_clip"] = package
    model = importlib.import_module("open_clip.model")
    tokenizer = importlib.import_module("open_clip.tokenizer")
    return folder, model, tokenizer


def main(out: Path) -> None:
    folder, model_module, tokenizer_module = _import_open_clip_modules()
    config = json.loads((folder / "model_configs" / "ViT-B-32-quickgelu.json").read_text())
    torch.manual_seed(0)
    model = model_module.CLIP(**config).eval()
    with torch.no_grad():  # LayerNorms and the temperature away from their trivial initial values
        for name, parameter in model.named_parameters():
            if "ln" in name or name == "logit_scale":
                parameter.add_(0.1 * torch.randn_like(parameter))
    torch.save(model.state_dict(), out / "checkpoint.pt")

    texts = json.loads((out / "texts.json").read_text(encoding="utf-8"))
    tokenizer = tokenizer_module.SimpleTokenizer(str(folder / "bpe_simple_vocab_16e6.txt.gz"))
    ids = tokenizer(texts, context_length=config["text_cfg"]["context_length"])
    pixels = torch.from_numpy(np.load(out / "pixels.npy"))
    with torch.no_grad():
        text = model.encode_text(ids)
        image = model.encode_image(pixels)
    np.savez(out / "reference.npz", ids=ids.numpy(), text=text.numpy(), image=image.numpy())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
