"""The README's public-data-set commands end to end on the fake MIMIC-CXR-JPG copy: `ingest` as
shipped, then `eval retrieval --db`. MIMIC's own split file puts patient 10000032 in train and in
validate, so the evaluation refuses that split unless told (laterals and the report's contents
are checked on a larger store in tests/evaluation/test_eval_store_source.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from dataset_fakes import write_mimic_jpg
from typer.testing import CliRunner

from chexretrieve.cli import app

runner = CliRunner()
_EVAL_FIXTURES = Path(__file__).resolve().parents[1] / "evaluation" / "eval_fixtures.py"


def _anchor_root(root: Path) -> Path:
    spec = importlib.util.spec_from_file_location("dataset_eval_fixtures", _EVAL_FIXTURES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.write_anchor_root(root, findings=("Pleural Effusion",))


def _evaluate(url: str, anchors: Path, out: Path, *extra: str):
    return runner.invoke(
        app,
        ["eval", "retrieval", "--db", url, "--encoder", "stand-in", "--anchors-root", str(anchors),
         "--findings", "Pleural Effusion", "--geometries", "cosine,softmax",
         "--experiments", "none", "--bootstrap", "20", "--query-split", "test",
         "--min-queries", "1", "--out", str(out), "--quiet", *extra],
    )  # fmt: skip


def test_mimic_jpg_ingest_then_eval_refuses_the_shared_patient(tmp_path, test_encoders):
    root = write_mimic_jpg(tmp_path / "mimic-cxr-jpg" / "2.0.0")
    url = f"sqlite:///{tmp_path / 'mimic.sqlite'}"
    ingested = runner.invoke(
        app, ["ingest", str(root), "--db", url, "--encoder", "stand-in", "--no-progress",
              "--workers", "0"],
    )  # fmt: skip
    assert ingested.exit_code == 0, ingested.output
    anchors = _anchor_root(tmp_path / "anchors")

    # queries from the test split (patient 10000764), keys from train: no patient is shared, so
    # the check lets it through (the fake is too small to score: "nothing could be evaluated")
    fine = _evaluate(url, anchors, tmp_path / "test-vs-train")
    assert fine.exit_code in (0, 1), fine.output
    assert "in both" not in " ".join(fine.output.split())
    # validate as queries: patient 10000032 (D3) also has train images (D1, D2)
    leak = _evaluate(url, anchors, tmp_path / "leak", "--query-split", "valid")
    text = " ".join(leak.output.split())
    assert leak.exit_code == 2, leak.output
    assert "1 patients have images in both" in text or "1 patient has images in both" in text
    assert "10000032" in text
    assert not (tmp_path / "leak").exists()
    allowed = _evaluate(url, anchors, tmp_path / "allowed", "--query-split", "valid",
                        "--allow-patient-overlap")  # fmt: skip
    assert allowed.exit_code in (0, 1), allowed.output  # past the check (scored or too small)
