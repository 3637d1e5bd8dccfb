"""Throughput of the CheXzero encoder at its real size (ViT-B/32, random weights).

Writes a CheXzero-layout checkpoint with ViT-B/32 shapes (151,277,313 parameters) to a temporary
file, loads it with ``load_encoder`` and measures, in one run:

- checkpoint load time (read + hash + build);
- CheXzero preprocessing rate for radiograph-sized images (2500 x 2048);
- image embedding rate end to end (``embed_images``) and for the model alone on preprocessed input;
- text embedding rate (a synthetic tokenizer; CLIP's real one gives similar lengths).

Ratios printed: preprocessing share of ``embed_images`` time, and batch-16 vs batch-1 model
throughput. Runs on CUDA (autocast) when available, unchanged.

    .venv/bin/python benchmarks/encoders.py                   # 48 images
    .venv/bin/python benchmarks/encoders.py --images 128 --device cuda
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from chexretrieve.encoders import EncoderConfig, load_encoder
from chexretrieve.encoders.chexzero import preprocess_chexzero
from chexretrieve.encoders.clip_architecture import ClipModel, ClipSizes
from chexretrieve.encoders.device import inference_context
from chexretrieve.encoders.tokenizer import byte_symbols

VIT_B_32 = ClipSizes(
    embed_dim=512, image_resolution=224, patch_size=32, vision_width=768, vision_layers=12,
    vision_heads=12, context_length=77, vocab_size=49408, text_width=512, text_layers=12,
    text_heads=8,
)  # fmt: skip


def write_tokenizer(folder: Path) -> Path:
    """A byte-level CLIP vocabulary without merges (each character one token; longer sentences)."""
    symbols = list(byte_symbols())
    tokens = symbols + [s + "</w>" for s in symbols] + ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return folder


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.1f}/s ({seconds:6.2f} s for {count})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "vit_b_32.pt"
        torch.save(ClipModel(VIT_B_32).state_dict(), checkpoint)
        size_mb = checkpoint.stat().st_size / 1e6
        config = EncoderConfig(device=args.device, tokenizer_path=write_tokenizer(Path(tmp) / "t"))
        start = time.perf_counter()
        encoder = load_encoder(f"chexzero:{checkpoint}", config=config)
        load_s = time.perf_counter() - start

    images = [rng.random((2500, 2048), dtype=np.float32) for _ in range(args.images)]
    print(f"device {encoder.device}, batch {encoder.batch_size}, torch threads "
          f"{torch.get_num_threads()}")  # fmt: skip
    print(f"checkpoint load ({size_mb:.0f} MB):   {load_s:6.2f} s")

    start = time.perf_counter()
    pixels = torch.stack([preprocess_chexzero(image) for image in images])
    prep_s = time.perf_counter() - start
    print(f"preprocess 2500x2048:      {rate(len(images), prep_s)}")

    def model_only(batch: int, count: int = len(pixels)) -> float:
        start = time.perf_counter()
        for i in range(0, count, batch):
            with inference_context(encoder.device, True):
                encoder.model.encode_image(pixels[i : i + batch].to(encoder.device))
        if encoder.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    model_only(encoder.batch_size, encoder.batch_size)  # warm-up
    model_s = model_only(encoder.batch_size)
    single_count = min(len(pixels), 16)
    single_s = model_only(1, single_count)
    print(f"model only, batch {encoder.batch_size:<3}:     {rate(len(images), model_s)}")
    print(f"model only, batch 1:       {rate(single_count, single_s)}")

    start = time.perf_counter()
    encoder.embed_images(images)
    embed_s = time.perf_counter() - start
    print(f"embed_images end to end:   {rate(len(images), embed_s)}")

    sentences = [f"there is a small left pleural effusion number {i}" for i in range(64)]
    start = time.perf_counter()
    encoder.embed_texts(sentences)
    text_s = time.perf_counter() - start
    print(f"embed_texts (~50 tokens):  {rate(len(sentences), text_s)}")

    print(f"ratio preprocessing / embed_images time:   {prep_s / embed_s:.2f}")
    speedup = (single_s / single_count) / (model_s / len(images))
    print(f"ratio batch-{encoder.batch_size} / batch-1 model throughput: {speedup:.2f}")


if __name__ == "__main__":
    main()
