"""`anchors list` piped and at 80 columns, and warnings of saved sets (issue 24, defect 11)."""

from __future__ import annotations

import logging

from anchors_testing import saved_effusion
from typer.testing import CliRunner

from chexretrieve.cli import app


def test_a_piped_list_has_every_key_whole_one_set_per_line(tmp_path) -> None:
    saved_effusion(tmp_path, "a")
    saved_effusion(tmp_path, "a-very-long-variant-name-for-a-narrow-terminal")
    result = CliRunner().invoke(app, ["anchors", "list", "--root", str(tmp_path)],
                                env={"COLUMNS": "80"})  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[0] == "key"
    keys = [line.split("\t")[0] for line in lines[1:]]
    assert keys == [
        "pleural_effusion.a@1",
        "pleural_effusion.a-very-long-variant-name-for-a-narrow-terminal@1",
    ]
    assert "…" not in result.stdout


def test_loading_a_set_with_a_warning_does_not_repeat_it_on_every_command(tmp_path, caplog):
    saved_effusion(tmp_path, "a")  # 6 sentences: a warning ("only 6 sentences")
    with caplog.at_level(logging.INFO):
        result = CliRunner().invoke(app, ["anchors", "list", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "only 6 sentences" not in result.output
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # `anchors validate` still says it
    shown = CliRunner().invoke(app, ["anchors", "validate", "--root", str(tmp_path)])
    assert "only 6 sentences" in shown.output
