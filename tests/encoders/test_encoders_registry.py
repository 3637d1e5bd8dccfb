"""Spec strings, device choice and configuration checks.

The ``phantom`` route is not tested here: it only imports chexretrieve.encoders.phantom, whose own
tests cover loading.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from chexretrieve.encoders import (
    EncoderConfig,
    EncoderError,
    EncoderSpec,
    list_encoders,
    load_encoder,
    parse_encoder_spec,
    resolve_tokenizer,
)
from chexretrieve.encoders.device import inference_context, resolve_batch_size, select_device
from chexretrieve.encoders.registry import TOKENIZER_ENV


def test_specs_parse_into_kind_argument_and_options() -> None:
    assert parse_encoder_spec("phantom") == EncoderSpec("phantom", "")
    assert parse_encoder_spec("phantom:/w/p.pt").path == Path("/w/p.pt")
    assert parse_encoder_spec("chexzero:/ckpt/best_1.pt").path == Path("/ckpt/best_1.pt")
    assert parse_encoder_spec(" HF-CLIP:/models/clip ") == EncoderSpec("hf-clip", "/models/clip")
    assert parse_encoder_spec("chexzero:C:/x.pt").path == Path("C:/x.pt")
    spec = parse_encoder_spec("chexzero:/c/best.pt?tokenizer=/v/bpe.txt.gz")
    assert (spec.path, spec.option("tokenizer")) == (Path("/c/best.pt"), "/v/bpe.txt.gz")
    # a '?' without NAME=VALUE after it belongs to the path
    assert parse_encoder_spec("chexzero:/odd?name.pt").path == Path("/odd?name.pt")
    assert parse_encoder_spec("stand-in:5:16") == EncoderSpec("stand-in", "5:16")


def test_bad_specs_list_the_accepted_forms() -> None:
    with pytest.raises(
        EncoderError, match="unknown encoder 'biomedclip:x'.*'chexzero:CHECKPOINT.pt"
    ):
        load_encoder("biomedclip:x")
    with pytest.raises(EncoderError, match="'chexzero' needs a path after 'chexzero:'"):
        load_encoder("chexzero")
    with pytest.raises(EncoderError, match="needs a path after 'hf-clip:'"):
        load_encoder("hf-clip:  ")
    with pytest.raises(EncoderError, match="'hf-clip' has no option 'tokenizer'.*none"):
        load_encoder("hf-clip:/m?tokenizer=/v.gz")
    with pytest.raises(EncoderError, match="'chexzero' has no option 'tokeniser'.*tokenizer"):
        load_encoder("chexzero:/m.pt?tokeniser=/v.gz")
    with pytest.raises(EncoderError, match="option 'tokenizer=' is not NAME=VALUE"):
        load_encoder("chexzero:/m.pt?tokenizer=")
    with pytest.raises(TypeError, match="EncoderConfig given twice"):
        load_encoder("phantom", EncoderConfig(), config=EncoderConfig())


def test_list_encoders_names_every_kind() -> None:
    kinds = {kind.name: kind for kind in list_encoders()}
    assert sorted(kinds) == ["chexzero", "hf-clip", "phantom", "stand-in"]
    assert kinds["chexzero"].form == "chexzero:CHECKPOINT.pt[?tokenizer=BPE.txt.gz]"
    assert all(kind.summary for kind in kinds.values())


def test_tokenizer_resolution_order(tmp_path, monkeypatch) -> None:
    checkpoint = tmp_path / "models" / "best.pt"
    checkpoint.parent.mkdir()
    monkeypatch.delenv(TOKENIZER_ENV, raising=False)
    assert resolve_tokenizer(f"chexzero:{checkpoint}") is None
    sibling = checkpoint.parent / "bpe_simple_vocab_16e6.txt.gz"
    sibling.write_bytes(b"")
    assert resolve_tokenizer(f"chexzero:{checkpoint}") == sibling
    monkeypatch.setenv(TOKENIZER_ENV, "/env/bpe.txt.gz")
    assert resolve_tokenizer(f"chexzero:{checkpoint}") == Path("/env/bpe.txt.gz")
    config = EncoderConfig(tokenizer_path="/flag/bpe.txt.gz")
    assert resolve_tokenizer(f"chexzero:{checkpoint}", config) == Path("/flag/bpe.txt.gz")
    in_spec = f"chexzero:{checkpoint}?tokenizer=/spec/bpe.txt.gz"
    assert resolve_tokenizer(in_spec) == Path("/spec/bpe.txt.gz")
    same = EncoderConfig(tokenizer_path="/spec/bpe.txt.gz")
    assert resolve_tokenizer(in_spec, same) == Path("/spec/bpe.txt.gz")
    with pytest.raises(EncoderError, match="two tokenizers given: /spec/bpe.txt.gz .* keep one"):
        resolve_tokenizer(in_spec, config)


def test_stand_in_is_a_registered_kind(monkeypatch) -> None:
    from chexretrieve.encoders.stand_in import TEST_ENCODERS_ENV, StandInEncoder

    monkeypatch.delenv(TEST_ENCODERS_ENV, raising=False)
    with pytest.raises(EncoderError, match="test stand-in, not a model.*CHEXRETRIEVE_TEST_ENC"):
        load_encoder("stand-in")
    monkeypatch.setenv(TEST_ENCODERS_ENV, "1")
    encoder = load_encoder("stand-in:0:16")
    assert isinstance(encoder, StandInEncoder) and encoder.embed_dim == 16
    with pytest.raises(EncoderError, match=r"expected stand-in\[:MS\[:DIM\]\]"):
        load_encoder("stand-in:fast")


def test_unexpected_loader_failures_become_one_actionable_line(tmp_path) -> None:
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(EncoderError) as caught:
        load_encoder(f"hf-clip:{folder}")
    assert str(folder) in str(caught.value) and "\n" not in str(caught.value)


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
