"""Session fixtures for the encoder tests (tiny tokenizers and a tiny CheXzero checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from encoder_builders import tiny_clip_state_dict, write_openai_merges, write_tokenizer_folder


@pytest.fixture(scope="session")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer_folder(tmp_path_factory.mktemp("clip-tokenizer"))


@pytest.fixture(scope="session")
def tokenizer_gz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_openai_merges(tmp_path_factory.mktemp("openai-bpe") / "tiny_bpe.txt.gz")


@pytest.fixture(scope="session")
def chexzero_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chexzero") / "tiny_chexzero.pt"
    torch.save(tiny_clip_state_dict(seed=0), path)
    return path
