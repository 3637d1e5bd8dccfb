"""`chexretrieve phantom make` and `phantom sheet`: files, CSVs, split, determinism, refusals."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pydicom
import pytest
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.findings import FINDINGS
from chexretrieve.phantom.archive import CHEXPERT_COLUMNS

runner = CliRunner()
N = 24


def _make(out: Path, *extra: str, seed: int = 3):
    args = ["phantom", "make", str(out), "--n", str(N), "--seed", str(seed), "--size", "64"]
    return runner.invoke(app, [*args, "--workers", "1", *extra])


def _text(output: str) -> str:
    """CLI output without the rich error box, as one line."""
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", output).split())


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _pixel_hashes(out: Path) -> dict[str, str]:
    return {
        row["Path"]: hashlib.sha256(
            pydicom.dcmread(out / row["Path"]).pixel_array.tobytes()
        ).hexdigest()
        for row in _rows(out / "labels.csv")
    }


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("phantom") / "archive"
    result = _make(out)
    assert result.exit_code == 0, result.output
    assert "SYNTHETIC" in result.output
    return out


def test_archive_has_chexpert_csvs(archive: Path) -> None:
    labels = _rows(archive / "labels.csv")
    assert len(labels) == N
    with open(archive / "labels.csv", encoding="utf-8") as handle:
        assert tuple(handle.readline().strip().split(",")) == CHEXPERT_COLUMNS
    for row in labels:
        assert row["Sex"] in ("Male", "Female") and row["Frontal/Lateral"] == "Frontal"
        assert row["AP/PA"] in ("AP", "PA") and 17 <= int(row["Age"]) <= 100
        assert all(row[name] in ("", "1.0", "0.0", "-1.0") for name in FINDINGS)
        assert row["No Finding"] in ("", "1.0")
        assert (archive / row["Path"]).is_file()
        assert row["Path"].startswith(("train/", "valid/")) and row["Path"].endswith(".dcm")
    assert any(row[name] == "-1.0" for row in labels for name in FINDINGS)
    reports = _rows(archive / "reports.csv")
    assert [r["Path"] for r in reports] == [r["Path"] for r in labels]
    assert all(r["Report"].strip() for r in reports)


def test_split_is_by_patient(archive: Path) -> None:
    train = _rows(archive / "train.csv")
    valid = _rows(archive / "valid.csv")
    assert len(train) + len(valid) == N and valid
    patient = lambda row: row["Path"].split("/")[1]  # noqa: E731
    assert not {patient(r) for r in train} & {patient(r) for r in valid}
    # validation labels are the truth: 0/1, no blanks or uncertain ones
    assert all(r[name] in ("0.0", "1.0") for r in valid for name in FINDINGS)
    truth = {r["Path"]: r for r in _rows(archive / "truth.csv")}
    for row in valid:
        assert all(row[name] == truth[row["Path"]][name] for name in FINDINGS)
    by_patient: dict[str, int] = {}
    for row in train + valid:
        by_patient[patient(row)] = by_patient.get(patient(row), 0) + 1
    assert max(by_patient.values()) >= 2


def test_dicom_files_are_synthetic_and_varied(archive: Path) -> None:
    manifest = json.loads((archive / "phantom.json").read_text())
    assert manifest["n_images"] == N and "SYNTHETIC" in manifest["notice"]
    seen = {"modality": set(), "photometric": set(), "syntax": set()}
    for row in _rows(archive / "labels.csv"):
        ds = pydicom.dcmread(archive / row["Path"])
        assert ds.Manufacturer == "chexretrieve phantom"
        assert ds.PatientName.family_name == "PHANTOM" and "SYNTHETIC" in ds.ImageComments
        assert ds.ViewPosition == row["AP/PA"] and ds.PatientAge == f"{int(row['Age']):03d}Y"
        assert (ds.Rows, ds.Columns) == (64, 64)
        seen["modality"].add(ds.Modality)
        seen["photometric"].add(ds.PhotometricInterpretation)
        seen["syntax"].add(ds.file_meta.TransferSyntaxUID.name)
    assert seen["modality"] == {"CR", "DX"}
    assert seen["photometric"] == {"MONOCHROME1", "MONOCHROME2"}
    assert len(seen["syntax"]) >= 3


def test_same_seed_same_archive_other_seed_differs(archive: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert _make(again).exit_code == 0
    for name in ("labels.csv", "reports.csv", "train.csv", "valid.csv", "truth.csv"):
        assert (again / name).read_bytes() == (archive / name).read_bytes(), name
    assert _pixel_hashes(again) == _pixel_hashes(archive)
    other = tmp_path / "other"
    assert _make(other, seed=4).exit_code == 0
    assert (other / "reports.csv").read_bytes() != (archive / "reports.csv").read_bytes()
    first_other = pydicom.dcmread(other / _rows(other / "labels.csv")[0]["Path"]).pixel_array
    first = pydicom.dcmread(archive / _rows(archive / "labels.csv")[0]["Path"]).pixel_array
    assert not np.array_equal(first, first_other)


def test_non_empty_output_is_refused_without_force(tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    keep = out / "notes.txt"
    keep.write_text("mine")
    result = _make(out)
    assert result.exit_code == 2
    assert "not empty" in _text(result.output) and "--force" in _text(result.output)
    assert keep.read_text() == "mine" and not (out / "labels.csv").exists()
    result = _make(out, "--force")
    assert result.exit_code == 0, result.output
    assert keep.read_text() == "mine" and (out / "labels.csv").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n", "0"], "positive"),
        (["--seed", "-1"], "seed"),
        (["--size", "32"], "size"),
        (["--size", "4096"], "size"),
    ],
)
def test_bad_arguments_exit_with_code_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["phantom", "make", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    assert message in _text(result.output)
    assert not (tmp_path / "o").exists()


def test_contact_sheet_command_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    result = runner.invoke(app, ["phantom", "sheet", str(out), "--size", "64"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = runner.invoke(app, ["phantom", "sheet", str(tmp_path / "sheet.jpg")])
    assert bad.exit_code == 2 and ".png" in _text(bad.output)
