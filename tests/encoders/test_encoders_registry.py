"""Spec strings, device choice and configuration checks.

The ``phantom`` route is not tested here: it only imports chexretrieve.encoders.phantom, whose own
tests cover loading.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from chexretrieve.encoders import EncoderConfig, EncoderError, load_encoder, parse_encoder_spec
from chexretrieve.encoders.device import inference_context, resolve_batch_size, select_device


def test_specs_parse_into_kind_and_path() -> None:
    assert parse_encoder_spec("phantom") == ("phantom", None)
    assert parse_encoder_spec("phantom:/w/p.pt") == ("phantom", Path("/w/p.pt"))
    assert parse_encoder_spec("chexzero:/ckpt/best_1.pt") == ("chexzero", Path("/ckpt/best_1.pt"))
    assert parse_encoder_spec(" HF-CLIP:/models/clip ") == ("hf-clip", Path("/models/clip"))
    assert parse_encoder_spec("chexzero:C:/x.pt") == ("chexzero", Path("C:/x.pt"))


def test_bad_specs_list_the_accepted_forms() -> None:
    with pytest.raises(
        EncoderError, match="unknown encoder 'biomedclip:x'.*'chexzero:CHECKPOINT.pt'"
    ):
        load_encoder("biomedclip:x")
    with pytest.raises(EncoderError, match="'chexzero' needs a path after 'chexzero:'"):
        load_encoder("chexzero")
    with pytest.raises(EncoderError, match="needs a path after 'hf-clip:'"):
        load_encoder("hf-clip:  ")


def test_device_choice() -> None:
    assert select_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert select_device("auto").type == expected
    if torch.cuda.is_available():
        assert select_device("cuda").type == "cuda"
    else:
        with pytest.raises(EncoderError, match="CUDA is not available.*'auto' or 'cpu'"):
            select_device("cuda")
    with pytest.raises(EncoderError, match="unknown device 'gpu0'"):
        select_device("gpu0")
    with pytest.raises(EncoderError, match="'meta' is not supported"):
        select_device("meta")


def test_batch_size_and_inference_context() -> None:
    assert resolve_batch_size(None, torch.device("cpu")) == 16
    assert resolve_batch_size(None, torch.device("cuda")) == 64
    assert resolve_batch_size(5, torch.device("cuda")) == 5
    with inference_context(torch.device("cpu"), use_autocast=True):
        assert torch.is_inference_mode_enabled()
        assert not torch.is_autocast_enabled("cpu")  # autocast is for CUDA only


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="batch_size must be at least 1 \\(got 0\\)"):
        EncoderConfig(batch_size=0)
    with pytest.raises(ValueError, match="max_text_tokens must be at least 2"):
        EncoderConfig(max_text_tokens=1)
    assert EncoderConfig(tokenizer_path="x/y").tokenizer_path == Path("x/y")
