"""On-disk fixtures for the evaluation tests: a tiny CheXpert-layout folder, an anchors folder, a
tiny random CheXzero checkpoint (built with the encoders engineer's test helper) and a tiny Hugging
Face CLIP folder with a labelled natural-image folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from chexretrieve.findings import FINDINGS

_BUILDERS = Path(__file__).resolve().parents[1] / "encoders" / "encoder_builders.py"


def encoder_builders():
    """tests/encoders/encoder_builders.py, imported by path (it is not a package module)."""
    spec = importlib.util.spec_from_file_location("eval_encoder_builders", _BUILDERS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_chexzero(folder: Path, seeds=(0,)) -> tuple[list[Path], Path]:
    """Tiny random CheXzero-layout checkpoints (one per seed) and a tokenizer folder."""
    import torch

    builders = encoder_builders()
    folder.mkdir(parents=True, exist_ok=True)
    checkpoints = []
    for seed in seeds:
        path = folder / f"tiny_chexzero_{seed}.pt"
        torch.save(builders.tiny_clip_state_dict(seed=seed), path)
        checkpoints.append(path)
    return checkpoints, builders.write_tokenizer_folder(folder / "tokenizer")


def write_chexpert_folder(
    parent: Path,
    n_train: int = 24,
    n_valid: int = 10,
    seed: int = 0,
    laterals: int = 0,
    shared_patients: int = 0,
) -> Path:
    """parent/CheXpert-v1.0-small/{train,valid}.csv + PNG/JPEG images, paths as CheXpert writes
    them (relative to parent). Validation patients are numbered from 64541 as in CheXpert.
    ``laterals``: the first that many patients of each split also get a ``view2_lateral`` image
    (same labels, ``Frontal/Lateral`` = Lateral); ``shared_patients``: the first that many
    validation images belong to training patients (a leaking split). Returns the dataset folder."""
    rng = np.random.default_rng(seed)
    root = parent / "CheXpert-v1.0-small"
    rows = {"train": [], "valid": []}
    images = []
    for split, count in (("train", n_train), ("valid", n_valid)):
        for i in range(count):
            patient = i if split == "train" or i < shared_patients else 64541 + i
            for view in ("frontal", "lateral") if i < laterals else ("frontal",):
                images.append((split, i, patient, view))
    for split, i, patient, view in images:
        effusion = i % 3 == 0
        number = 1 if view == "frontal" else 2
        rel = f"CheXpert-v1.0-small/{split}/patient{patient:05d}/study1/view{number}_{view}"
        rel += ".jpg" if i % 2 else ".png"
        path = parent / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 120, size=(40, 36)).astype(np.uint8)
        if effusion:
            pixels[28:, :] = 230
        Image.fromarray(pixels, mode="L").save(path)
        labels = {f: np.nan for f in FINDINGS}
        labels["Pleural Effusion"] = 1.0 if effusion else (0.0 if i % 4 else np.nan)
        labels["Cardiomegaly"] = 1.0 if i % 4 == 1 else 0.0
        if split == "train" and i == 5:
            labels["Pleural Effusion"] = -1.0
        rows[split].append(
            {
                "Path": rel,
                "Sex": "Female" if i % 2 else "Male",
                "Age": 40 + i,
                "Frontal/Lateral": view.capitalize(),
                "AP/PA": ("AP" if i % 2 else "PA") if view == "frontal" else np.nan,
                **labels,
            }
        )
    for split, table in rows.items():
        frame = pd.DataFrame(table)
        if split == "valid":  # CheXpert's validation labels have no blanks
            frame[list(FINDINGS)] = frame[list(FINDINGS)].fillna(0.0)
        frame.to_csv(root / f"{split}.csv", index=False)
    return root


def write_anchor_root(
    root: Path, findings=("Pleural Effusion", "Cardiomegaly"), variants=2
) -> Path:
    """Finding variants, a broad corpus and a projection nuisance set, via the anchors API."""
    from chexretrieve.anchors import AnchorSet, AnchorSource, save_new_version

    source = AnchorSource(kind="curated", date="2026-01-01")
    for finding in findings:
        low = finding.lower()
        for v in range(variants):
            sentences = [
                (f"there is a small {low} on the left {v}", "positive"),
                (f"large {low} is present {v}", "positive"),
                (f"moderate {low} seen bilaterally {v}", "positive"),
                (f"no {low} {v}", "negative"),
                (f"no evidence of {low} {v}", "negative"),
                (f"{low} has resolved {v}", "negative"),
            ]
            s = AnchorSet.create(
                sentences=sentences, source=source, finding=finding, variant="abcdefgh"[v]
            )
            save_new_version(s, root)
    broad = [(f"the lungs are clear {i}", "negative") for i in range(8)]
    broad += [(f"there is an opacity in zone {i}", "positive") for i in range(8)]
    save_new_version(
        AnchorSet.create(sentences=broad, source=source, context="broad/clinical"), root
    )
    nuisance = [("portable AP radiograph", "positive"), ("PA upright view", "positive")]
    nuisance += [("obese body habitus", "positive"), ("slender patient", "positive")]
    save_new_version(
        AnchorSet.create(sentences=nuisance, source=source, context="nuisance/projection-habitus"),
        root,
    )
    return root


def write_natural_folder(root: Path, seed: int = 0) -> Path:
    """root/<style>/<class>/img.png: 2 styles x 3 classes x 2 images, colour."""
    rng = np.random.default_rng(seed)
    colours = {"sketch": (40, 40, 40), "painting": (200, 60, 20)}
    for style, base in colours.items():
        for c_i, cls in enumerate(("dog", "car", "tree")):
            for k in range(2):
                image = np.zeros((32, 32, 3), dtype=np.uint8) + np.array(base, dtype=np.uint8)
                image[4 + 8 * c_i : 10 + 8 * c_i, 4:28] = 255
                image = np.clip(image + rng.integers(0, 30, image.shape), 0, 255).astype(np.uint8)
                path = root / style / cls / f"img{k}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(image, mode="RGB").save(path)
    return root


def write_tiny_hf_clip(folder: Path) -> Path:
    """A random tiny CLIPModel + tokenizer + image processor, saved with save_pretrained."""
    import math

    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    builders = encoder_builders()
    vocab = builders.TINY_VOCAB_SIZE
    tok_dir = builders.write_tokenizer_folder(folder.parent / (folder.name + "-tokenizer"))
    config = CLIPConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 40,
            "bos_token_id": vocab - 2,
            "eos_token_id": vocab - 1,
            "pad_token_id": vocab - 1,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=16,
        logit_scale_init_value=math.log(20.0),
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(folder)
    CLIPTokenizer.from_pretrained(tok_dir, local_files_only=True).save_pretrained(folder)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(folder)
    return folder
