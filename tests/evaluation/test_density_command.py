"""`chexretrieve eval density` end to end on a tiny world: two encoders, two EM seeds, the report
folder, its manifest (what the staleness check of committed reports reads), the cache on a rerun,
refusing to overwrite a report, and the exit status of a failed check."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.evaluation import density_data, density_known
from chexretrieve.evaluation.density_commands import CHECK_FAILED

runner = CliRunner()


def invoke(monkeypatch, args):
    """Run the CLI with ``sys.argv`` as a shell would set it (the report prints the command)."""
    monkeypatch.setattr(sys, "argv", ["chexretrieve", *args])
    return runner.invoke(app, args)


def _external(synthetic: int = 60, size: int = 320):
    rng = np.random.default_rng(0)
    smooth = np.cumsum(np.cumsum(rng.normal(size=(64, 64)), 0), 1)
    smooth = (smooth - smooth.min()) / np.ptp(smooth)
    items = [(density_data.FAR_BODY_PARTS, f"part {i}", f"part {i}", np.roll(smooth, 9 * i, 0))
             for i in range(3)]  # fmt: skip
    items += [(density_data.FAR_PHOTOGRAPHS, "photo", "photo", smooth.T.copy())]
    items += [(density_data.FAR_SYNTHETIC, "noise", f"noise {i}", rng.random((64, 64)))
              for i in range(4)]  # fmt: skip
    items += [(density_data.CHEST_FILM, "RG1_UNCR.dcm (CR)", "RG1", smooth[::-1].copy())]
    return items


@pytest.fixture
def small_world(monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setattr(density_data, "external_images", _external)
    monkeypatch.setattr(density_known, "N_ARCHIVE", 450)
    monkeypatch.setattr(density_known, "N_HELDOUT", 150)
    monkeypatch.setattr(density_known, "N_OOD", 90)


ARGS = [
    "eval", "density", "--encoder", "stand-in", "--encoder", "stand-in:0:16",
    "--phantom-seeds", "5", "--em-seeds", "0,1", "--n-archive", "60", "--n-heldout", "40",
    "--n-control", "30", "--n-shifted", "3", "--candidates", "1,2,4", "--quiet",
]  # fmt: skip


def test_eval_density_writes_a_report_with_spreads_and_a_full_manifest(
    tmp_path, small_world, monkeypatch
):
    out, cache = tmp_path / "report", tmp_path / "cache"
    result = invoke(monkeypatch, [*ARGS, "--out", str(out), "--cache-dir", str(cache)])
    manifest = json.loads((out / "manifest.json").read_text())
    failed = manifest["checks"]["control"]["check"] != "passed" or (
        manifest["checks"]["known_answer"] != "passed"
    )
    assert result.exit_code == (CHECK_FAILED if failed else 0), result.output
    report = (out / "report.md").read_text()
    assert "Command: `chexretrieve eval density" in report
    assert "2 encoder(s)" in report and "= 4 runs" in report
    for heading in ("Checks that this evaluation can fail", "Headline: OOD AUROC",
                    "Known-answer worlds", "Long tail matched for abnormality",
                    "structureless control", "Component count"):  # fmt: skip
        assert heading in report
    assert (out / "figures" / "k_curve.png").stat().st_size > 1000
    ood = (out / "tables" / "runs_ood.csv").read_text()
    assert "stand-in:d32" in ood and "stand-in:d16" in ood and "in-distribution control" in ood
    # what the staleness check of committed reports reads
    from chexretrieve.phantom.config import RENDER_VERSION

    assert manifest["render_version"] == RENDER_VERSION
    assert set(manifest["generator_fingerprints"]) == {"5"}
    assert {e["id"] for e in manifest["encoders"]} == {"stand-in:d32", "stand-in:d16"}
    assert all(e["weights"] and e["image_probe"] and e["text_probe"] for e in manifest["encoders"])
    assert manifest["anchor_sets"] and all(
        h.startswith("sha256:") for h in manifest["anchor_sets"].values()
    )
    assert manifest["code_version"]["package"] and manifest["command"].startswith(
        "chexretrieve eval"
    )
    assert manifest["settings"]["runs"] == 4 and manifest["embeddings_cached"] is False
    assert manifest["checks"]["ood_model"]["runs"] == 4

    # a report folder is never overwritten silently
    again = invoke(monkeypatch, [*ARGS, "--out", str(out), "--cache-dir", str(cache)])
    assert again.exit_code == 2 and "already holds a report" in again.output
    (out / "README.md").write_text("what changed", encoding="utf-8")
    (out / "tables" / "stale.csv").write_text("old", encoding="utf-8")
    forced = invoke(monkeypatch, [*ARGS, "--out", str(out), "--cache-dir", str(cache), "--force"])
    assert forced.exit_code in (0, CHECK_FAILED), forced.output
    assert (out / "README.md").read_text() == "what changed"
    assert not (out / "tables" / "stale.csv").exists()
    assert json.loads((out / "manifest.json").read_text())["embeddings_cached"] is True


def test_eval_density_refuses_an_encoders_own_training_world(tmp_path, small_world):
    result = runner.invoke(
        app, ["eval", "density", "--out", str(tmp_path / "r"), "--phantom-seeds", "1", "--quiet"]
    )
    assert result.exit_code == 2 and "trained on phantom world seed 1" in result.output
    assert not (tmp_path / "r" / "report.md").exists()


def test_a_failed_known_answer_check_exits_with_its_status(tmp_path, small_world, monkeypatch):
    monkeypatch.setitem(density_known.EXPECTED, "vMF mixture", "gaussian")  # a wrong expectation
    result = runner.invoke(
        app, [*ARGS, "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"),
              "--em-seeds", "0"],
    )  # fmt: skip
    assert result.exit_code == CHECK_FAILED
    assert "Known-answer worlds: FAILED" in (tmp_path / "r" / "report.md").read_text()
