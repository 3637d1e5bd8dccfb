"""Curation, evaluation-report and settings handlers of the UI (no Gradio)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner
from ui_fakes import make_service

from chexretrieve.ui.config import UIConfig, is_loopback
from chexretrieve.ui.curation import CurationDesk, parse_edit_text, sentences_html, set_as_text
from chexretrieve.ui.reports import load_report, report_choices

REPO_ANCHORS = Path(__file__).resolve().parents[2] / "anchors"


@pytest.fixture
def anchors_dir(tmp_path):
    root = tmp_path / "anchors"
    shutil.copytree(
        REPO_ANCHORS / "findings" / "pleural_effusion", root / "findings" / "pleural_effusion"
    )
    return root


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_edit_text_round_trips_and_bad_lines_are_named(anchors_dir):
    desk = CurationDesk(anchors_dir)
    chosen = desk.get("pleural_effusion.a@1")
    text = set_as_text(chosen)
    assert text.splitlines()[0].startswith("+ ")
    assert parse_edit_text(text) == list(zip(chosen.sentences, chosen.polarities, strict=True))
    assert parse_edit_text("# note\n\n+ a\n-  b ") == [("a", "positive"), ("b", "negative")]
    with pytest.raises(ValueError, match=r"line 2 must start with '\+' \(positive\) or '-'"):
        parse_edit_text("+ fine\nno sign here")
    with pytest.raises(ValueError, match="line 1 has a '-' but no sentence"):
        parse_edit_text("-")
    with pytest.raises(ValueError, match="the edit holds no sentences"):
        parse_edit_text("# only a comment")


def test_save_edit_writes_new_versions_and_never_overwrites(anchors_dir):
    desk = CurationDesk(anchors_dir)
    before = _digest(anchors_dir)
    chosen = desk.get("pleural_effusion.a@1")
    text = set_as_text(chosen) + "\n+ Tiny effusion <in> the left costophrenic recess."
    saved = desk.save_edit(chosen.key, text, "add a recess sentence")
    assert saved.key == "pleural_effusion.a@2"
    assert saved.path == anchors_dir / "findings" / "pleural_effusion" / "v2-a.yaml"
    assert "1 added" in saved.summary
    after = _digest(anchors_dir)
    assert {k: v for k, v in after.items() if k in before} == before  # old files untouched
    new = desk.get("pleural_effusion.a@2")
    assert new.sentences[-1] == "Tiny effusion <in> the left costophrenic recess."
    assert new.description == "add a recess sentence"
    assert "&lt;in&gt;" in sentences_html(new) and "<in>" not in sentences_html(new)
    assert desk.set_choices("Pleural Effusion")[:2] == [
        "pleural_effusion.a@2",
        "pleural_effusion.a@1",
    ]
    assert desk.previous_key("pleural_effusion.a@2") == "pleural_effusion.a@1"
    assert desk.previous_key("pleural_effusion.a@1") is None
    # editing the old version again makes version 3, not a second version 2
    third = desk.save_edit("pleural_effusion.a@1", "+ Only one.\n- None.", "")
    assert third.key == "pleural_effusion.a@3"
    assert any("only 2 sentences" in w for w in third.warnings)


def test_save_edit_refuses_no_change_and_invalid_sets(anchors_dir):
    desk = CurationDesk(anchors_dir)
    chosen = desk.get("pleural_effusion.b@1")
    with pytest.raises(ValueError, match="nothing changed: the text is exactly pleural_effusion"):
        desk.save_edit(chosen.key, set_as_text(chosen), "")
    with pytest.raises(ValueError, match="duplicate sentence"):
        desk.save_edit(chosen.key, "+ Small effusion.\n+ small effusion", "")
    with pytest.raises(ValueError, match="choose an anchor set first"):
        desk.save_edit("", "+ x", "")
    assert desk.set_choices("pleural effusion").count("pleural_effusion.b@2") == 0


def test_impact_of_an_edit_on_labelled_archive(anchors_dir, tmp_path):
    service = make_service(tmp_path)
    desk = CurationDesk(anchors_dir, None, service.encoder, lambda: service.gallery)
    chosen = desk.get("pleural_effusion.a@1")
    kept = "\n".join(set_as_text(chosen).splitlines()[::2])
    saved = desk.save_edit(chosen.key, kept, "every other sentence")
    markdown = desk.impact_markdown(chosen.key, saved.key)
    assert (
        "**Impact of pleural_effusion.a@1 → pleural_effusion.a@2** on Pleural Effusion" in markdown
    )
    values = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in markdown.splitlines()
        if line.startswith("| before") or line.startswith("| after") or line.startswith("| cos")
    }
    assert len(values) == 3
    assert all(0.0 <= float(v) <= 1.0 for v in values.values())
    with pytest.raises(ValueError, match="impact needs an archive and its encoder"):
        CurationDesk(anchors_dir).impact_markdown(chosen.key, saved.key)


def test_reports_newest_first_escaped_with_figures(tmp_path):
    from PIL import Image

    from chexretrieve.evaluation.report import EvaluationReport, write_report

    root = tmp_path / "reports"
    assert load_report(root) is None and report_choices(root) == []
    table = pd.DataFrame({"finding": ["Edema", "<b>Average</b>"], "AUPRC": ["0.41", "0.38"]})
    for name in ("older", "newer"):
        write_report(
            EvaluationReport(
                title=f"Report {name}",
                command="chexretrieve eval retrieval",
                source="phantom <archive>",
                extra_tables={"Per-finding AUPRC": table.set_index("finding")},
            ),
            root / name,
        )
        time.sleep(0.02)
    os.utime(root / "older" / "report.md", (1, 1))
    (root / "newer" / "figures").mkdir(exist_ok=True)
    Image.fromarray(np.full((20, 30), 200, np.uint8)).save(root / "newer" / "figures" / "fig_a.png")
    (root / "newer" / "report.md").write_text(
        (root / "newer" / "report.md").read_text() + "\n![fig](figures/fig_a.png)\n"
    )
    assert report_choices(root) == ["newer", "older"]
    view = load_report(root)
    assert view.name == "newer"
    assert "# Report newer" in view.markdown and "## Per-finding AUPRC" in view.markdown
    assert "| Edema | 0.41 |" in view.markdown
    assert "&lt;b&gt;Average&lt;/b&gt;" in view.markdown and "<b>" not in view.markdown
    assert "phantom &lt;archive&gt;" in view.markdown and "![fig]" not in view.markdown
    assert [c for _, c in view.figures] == ["fig a"] and view.figures[0][0].shape == (20, 30, 3)
    assert load_report(root, "older").name == "older"
    with pytest.raises(ValueError, match="no report 'missing'"):
        load_report(root, "missing")


def test_ui_config_is_safe_by_default():
    config = UIConfig()
    assert config.host == "127.0.0.1" and config.sign_in == "none" and config.max_upload_mb == 50
    assert is_loopback("localhost") and is_loopback("::1") and not is_loopback("0.0.0.0")
    with pytest.raises(ValueError, match="refusing to serve the archive on '0.0.0.0' without"):
        UIConfig(host="0.0.0.0")
    assert UIConfig(host="0.0.0.0", sign_in="accounts").sign_in == "accounts"
    assert (
        "plain HTTP on 0.0.0.0" in UIConfig(host="0.0.0.0", sign_in="accounts").plain_http_warning
    )
    assert UIConfig(sign_in="accounts").plain_http_warning is None  # loopback
    with pytest.raises(ValueError, match="unknown sign-in mode"):
        UIConfig(sign_in="password")
    with pytest.raises(ValueError, match="needs --trusted-header"):
        UIConfig(sign_in="header")
    with pytest.raises(ValueError, match="needs both --ssl-certfile and --ssl-keyfile"):
        UIConfig(ssl_certfile=Path("cert.pem"))
    with pytest.raises(ValueError, match="port must be between 1 and 65535"):
        UIConfig(port=0)
    with pytest.raises(ValueError, match="max_upload_mb must be between 1 and 2048"):
        UIConfig(max_upload_mb=0)


def test_serve_command_refuses_unsafe_settings(monkeypatch):
    from chexretrieve.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--login", "ana"])
    assert result.exit_code == 2
    assert "--login (one shared password) was replaced by per-user accounts" in result.output
    assert "chexretrieve users add NAME" in result.output
    result = runner.invoke(app, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "refusing to serve the archive on '0.0.0.0' without sign-in" in result.output
