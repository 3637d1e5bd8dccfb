"""`eval retrieval --db` on a store ingested from DICOM files with frontal and lateral views:
laterals are left out by default (from ViewPosition, the store's metadata), --frontal-only no
longer crashes, the report names files by path, and a split sharing patients is refused."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pydicom
import pytest
from eval_fixtures import write_anchor_root
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.findings import FINDINGS

runner = CliRunner()
_FIXTURES = Path(__file__).resolve().parents[1] / "ingest" / "ingest_fixtures.py"


def _write_dx():
    spec = importlib.util.spec_from_file_location("eval_ingest_fixtures", _FIXTURES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.write_dx


def _store(tmp_path, monkeypatch, leak: bool = False) -> str:
    """train: 24 images of 12 patients, valid: 12 images of 6 patients; every third image a
    lateral (ViewPosition LL or LATERAL); Edema positive on every other image; training images 6
    and 12 have no label row."""
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    write_dx = _write_dx()
    archive = tmp_path / "archive"
    lines = ["Path," + ",".join(FINDINGS)]
    edema = FINDINGS.index("Edema")
    for split, count, start in (("train", 24, 0), ("valid", 12, 100)):
        for i in range(start, start + count):
            path = write_dx(archive / split / f"image{i:04d}.dcm", i)
            ds = pydicom.dcmread(path)
            patient = (i - start) // 2 if split == "train" or leak else 500 + (i - start) // 2
            ds.PatientID = f"PAT{patient:03d}"
            ds.ViewPosition = ("LL" if i % 2 else "LATERAL") if i % 3 == 2 else "PA"
            ds.save_as(path, enforce_file_format=True)
            if i in (6, 12):  # two studies missing from the label file
                continue
            cells = [""] * len(FINDINGS)
            cells[edema] = "1" if i % 2 == 0 else "0"
            lines.append(f"{split}/image{i:04d}.dcm," + ",".join(cells))
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(lines) + "\n")
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    result = runner.invoke(
        app,
        ["ingest", str(archive), "--db", url, "--encoder", "stand-in", "--labels", str(labels),
         "--no-progress", "--workers", "0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return url


def _eval(url, anchors, out, *extra):
    return runner.invoke(
        app,
        ["eval", "retrieval", "--db", url, "--encoder", "stand-in", "--anchors-root", str(anchors),
         "--findings", "edema", "--geometries", "cosine,softmax", "--experiments", "none",
         "--bootstrap", "50", "--min-queries", "2", "--out", str(out), "--quiet", *extra],
    )  # fmt: skip


def test_store_source_views_paths_and_patients(tmp_path, monkeypatch):
    url = _store(tmp_path, monkeypatch)
    anchors = write_anchor_root(tmp_path / "anchors", findings=("Edema",))
    result = _eval(url, anchors, tmp_path / "frontal")
    assert result.exit_code == 0, result.output
    queries = pd.read_csv(tmp_path / "frontal" / "queries.csv")
    # valid images 100..111 with Edema on even indices; 101, 104, 107, 110 are lateral
    expected = [f"image{i:04d}.dcm" for i in range(100, 112) if i % 2 == 0 and i % 3 != 2]
    assert [Path(p).name for p in queries["image"]] == expected
    assert set(queries["view"]) == {"frontal"}
    assert queries["patient"].str.startswith("PAT5").all()
    keys = pd.read_csv(tmp_path / "frontal" / "keys.csv")
    # 24 minus 8 laterals minus the 2 images without labels (not negatives: left out)
    assert len(keys) == 14 and set(keys["view"]) == {"frontal"}
    assert not keys["image"].str.contains("image0006|image0012").any()
    md = (tmp_path / "frontal" / "report.md").read_text()
    assert "from the `view_group` column: 22 frontal, 12 lateral" in md
    assert "2 embedded images have no labels in the store and were left out" in md
    # ... and the Protocol paragraph states the count per split (issue 32)
    assert (
        "Unlabelled images: 2 embedded images have no labels row (2 without a recorded split)" in md
    )
    assert "Patients (from `patient_id`): the query and key splits share no patient" in md

    alias = _eval(url, anchors, tmp_path / "alias", "--frontal-only")
    assert alias.exit_code == 0, alias.output  # today: "labels have no view column" traceback
    assert pd.read_csv(tmp_path / "alias" / "queries.csv").equals(queries)
    lateral = _eval(url, anchors, tmp_path / "lateral", "--views", "lateral", "--min-queries", "1")
    assert lateral.exit_code == 0, lateral.output
    views = set(pd.read_csv(tmp_path / "lateral" / "queries.csv")["view"])
    assert views == {"lateral"}

    nothing = _eval(url, anchors, tmp_path / "none", "--min-queries", "50")
    assert nothing.exit_code == 1
    assert "nothing could be evaluated" in nothing.output
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("allow", [False, True])
def test_store_split_sharing_patients(tmp_path, monkeypatch, allow):
    url = _store(tmp_path, monkeypatch, leak=True)
    anchors = write_anchor_root(tmp_path / "anchors", findings=("Edema",))
    extra = ["--allow-patient-overlap"] if allow else []
    result = _eval(url, anchors, tmp_path / "r", *extra)
    text = " ".join(result.output.split())
    if not allow:
        assert result.exit_code == 2
        assert "6 patients have images in both the query split 'valid' and the key split" in text
        assert "(e.g. PAT000, PAT001, PAT002, PAT003, PAT004, ...)" in text
        return
    assert result.exit_code == 0, result.output
    md = " ".join((tmp_path / "r" / "report.md").read_text().split())
    assert "6 patients have images in both the query and the key split" in md
    assert "`--allow-patient-overlap` was given" in md
