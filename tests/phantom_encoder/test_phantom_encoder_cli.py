"""`chexretrieve phantom train` / `zero-shot` refuse bad options before any work starts."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from chexretrieve.cli import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    """Exit code and the output with rich's box drawing and line wrapping undone."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


def test_train_refuses_to_overwrite_weights_without_force(tmp_path):
    out = tmp_path / "w.pt"
    out.write_bytes(b"earlier run")
    code, output = _run("phantom", "train", "--out", str(out))
    assert code == 2 and "w.pt already exists; pass --force" in output
    assert out.read_bytes() == b"earlier run"


def test_train_refuses_bad_settings(tmp_path):
    result = runner.invoke(
        app, ["phantom", "train", "--out", str(tmp_path / "w.pt"), "--steps", "0"]
    )
    assert result.exit_code == 2
    assert "steps must be a positive integer" in result.output
    result = runner.invoke(app, ["phantom", "train", "--out", str(tmp_path / "w.txt")])
    assert result.exit_code == 2 and "must end in .pt" in result.output


def test_zero_shot_refuses_bad_settings(tmp_path):
    code, output = _run("phantom", "zero-shot", "--n", "3")
    assert code == 2 and "at least 10 validation cases" in output
    code, output = _run("phantom", "zero-shot", "--size", "8")
    assert code == 2 and "size 8 is out of range" in output
    code, output = _run("phantom", "zero-shot", "--out", str(tmp_path / "t.txt"))
    assert code == 2 and "ending in .md" in output


def test_train_refuses_to_measure_gates_on_its_training_world(tmp_path):
    code, output = _run("phantom", "train", "--out", str(tmp_path / "w.pt"), "--seed", "0")
    assert code == 2 and "--eval-seed 0 is the training world" in output
    assert not (tmp_path / "w.pt").exists()


def test_gates_refuse_bad_settings(tmp_path):
    code, output = _run("phantom", "gates", "--n", "5")
    assert code == 2 and "at least 20 images" in output
    code, output = _run("phantom", "gates", "--out", str(tmp_path / "g.txt"))
    assert code == 2 and "ending in .md" in output


def test_gates_refuse_the_weights_training_world():
    """The bundled v1 weights were trained on world 0: measuring them on world 0 is refused."""
    code, output = _run("phantom", "gates", "--weights", "phantom-v1", "--seed", "0")
    assert code == 2 and "trained on phantom world seed 0, the same world" in output


def test_eval_refuses_a_non_positive_inverse_temperature():
    code, output = _run("eval", "retrieval", "--inv-temperature", "0", "--experiments", "none")
    assert code == 2 and "--inv-temperature must be positive" in output
