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
