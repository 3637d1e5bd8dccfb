"""`chexretrieve encoders check`."""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from chexretrieve.cli import app


def test_check_prints_id_size_and_temperature(chexzero_checkpoint, tokenizer_folder) -> None:
    result = CliRunner().invoke(
        app,
        ["encoders", "check", f"chexzero:{chexzero_checkpoint}", "--tokenizer",
         str(tokenizer_folder), "--device", "cpu"],
        terminal_width=200,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    digest = hashlib.sha256(Path(chexzero_checkpoint).read_bytes()).hexdigest()[:12]
    assert f"chexzero:{digest}" in result.output
    assert "14.29" in result.output  # exp(log(1 / 0.07))
    assert "embedding size" in result.output and "32" in result.output
    assert "text" in result.output and "ok, cosine" in result.output


def test_check_reports_a_bad_checkpoint(tmp_path) -> None:
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    result = CliRunner().invoke(
        app, ["encoders", "check", f"chexzero:{broken}"], terminal_width=300
    )
    assert result.exit_code == 2
    assert "broken.pt cannot be read by torch.load" in " ".join(result.output.split())


def test_an_unloadable_encoder_is_one_line_and_exit_2(tmp_path) -> None:
    """The real command line (not CliRunner): no traceback, whatever the loader raised."""
    import os
    import subprocess
    import sys

    folder = tmp_path / "unloadable"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "chexretrieve", "encoders", "check", f"hf-clip:{folder}"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output and len(output.strip().splitlines()) <= 3, output
    assert "unloadable" in output and "cannot" in output


def test_the_root_group_turns_encoder_errors_into_exit_2() -> None:
    import typer

    from chexretrieve.cli import _CommandGroup
    from chexretrieve.encoders import EncoderError

    probe = typer.Typer(cls=_CommandGroup)

    @probe.command()
    def fails() -> None:
        raise EncoderError("checkpoint x.pt is not a CLIP ViT state dict; pass a CheXzero .pt")

    @probe.command()
    def other() -> None:
        pass

    result = CliRunner().invoke(probe, ["fails"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: checkpoint x.pt is not a CLIP ViT state dict; pass a CheXzero .pt"
    )


def test_list_shows_every_kind_and_its_spec() -> None:
    result = CliRunner().invoke(app, ["encoders", "list"], terminal_width=250)
    assert result.exit_code == 0, result.output
    for form in ("chexzero:CHECKPOINT.pt[?tokenizer=BPE.txt.gz]", "hf-clip:FOLDER",
                 "phantom[:WEIGHTS.pt]", "stand-in[:MS[:DIM]]"):  # fmt: skip
        assert form in result.output
