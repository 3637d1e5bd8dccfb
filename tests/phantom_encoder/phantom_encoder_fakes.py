"""Stand-ins for the frozen MiniLM and the phantom generator, so training tests stay fast."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from chexretrieve.findings import FINDINGS


def fake_sentence_encoder(texts):
    """A deterministic 384-d unit vector per distinct text (a hash seeds a Gaussian)."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        rows.append(torch.randn(384, generator=torch.Generator().manual_seed(seed)))
    if not rows:
        return torch.zeros(0, 384)
    return torch.nn.functional.normalize(torch.stack(rows), dim=-1)


@dataclass
class FakeCase:
    image: np.ndarray
    report: str
    sentences: list[str]
    truth: dict[str, bool]
    metadata: dict[str, Any] = field(default_factory=dict)


def fake_generate(seed: int, index: int, config) -> FakeCase:
    """A case whose single visible sign (a bright square) is what its report talks about."""
    rng = np.random.default_rng([seed, index])
    size = config.size
    image = rng.uniform(0.2, 0.4, (size, size)).astype(np.float32)
    bright = bool(rng.random() < 0.5)
    if bright:
        image[size // 4 : size // 2, size // 4 : size // 2] = 0.95
    truth = {name: False for name in FINDINGS}
    truth["Lung Lesion"] = bright
    sentences = ["A mass is seen." if bright else "No mass.", "Heart size is normal."]
    split = "valid" if index % 5 == 4 else "train"
    return FakeCase(image, " ".join(sentences), sentences, truth, {"split": split})
