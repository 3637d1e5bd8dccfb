"""`chexretrieve anchors list | show | validate | diff` on a temporary anchors folder."""

from __future__ import annotations

import json

from anchors_testing import EFFUSION, effusion_set, line_of, saved_effusion
from typer.testing import CliRunner

from chexretrieve.anchors import save_new_version
from chexretrieve.cli import app

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["anchors", *args], env={"COLUMNS": "200"})


def test_list_and_show(tmp_path) -> None:
    saved_effusion(tmp_path, "a")
    saved_effusion(tmp_path, "b")
    result = _run("list", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "2 anchor sets" in result.output and "pleural_effusion.b@1" in result.output
    result = _run("show", "pleural_effusion.b@1", "--root", str(tmp_path), "--limit", "2")
    assert result.exit_code == 0, result.output
    assert "Small left pleural effusion." in result.output
    assert "No pleural effusion." not in result.output and "4 more" in result.output
    result = _run("show", "nothing@9", "--root", str(tmp_path))
    assert result.exit_code == 2 and "no anchor set 'nothing@9'" in result.output


def test_validate_exit_codes_and_file_line_messages(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    result = _run("validate", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "1 files: 0 errors, 1 warnings" in result.output  # only 6 sentences
    assert _run("validate", "--strict", "--root", str(tmp_path)).exit_code == 1
    path.write_text(path.read_text().replace("No pleural effusion.", "No effusion."))
    result = _run("validate", str(path))
    assert result.exit_code == 1
    assert f"{path.name}:{line_of(path, 'content_hash')}: error: content_hash" in result.output


def test_diff_plain_and_json(tmp_path) -> None:
    first = saved_effusion(tmp_path)
    second = effusion_set(sentences=EFFUSION[:-1] + (("Trace effusion.", "positive"),)).revised()
    save_new_version(second, tmp_path)
    result = _run("diff", str(first), "pleural_effusion.a@2", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "pleural_effusion.a@1 -> pleural_effusion.a@2: 1 added, 1 removed" in result.output
    result = _run(
        "diff", "pleural_effusion.a@1", "pleural_effusion.a", "--json", "--root", str(tmp_path)
    )
    data = json.loads(result.output)
    assert data["added"] == [{"text": "Trace effusion.", "polarity": "positive"}]
    assert data["removed"] == [
        {"text": "The costophrenic angles are sharp.", "polarity": "negative"}
    ]
