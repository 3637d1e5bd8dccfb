"""`chexretrieve ingest` as users run it: exit codes, report file, labels, strictness."""

from __future__ import annotations

import json

import pytest
from ingest_fixtures import write_archive, write_bad_files
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.findings import FINDINGS
from chexretrieve.store import open_store

runner = CliRunner()


def ingest(*args: str):
    return runner.invoke(app, ["ingest", *args, "--no-progress", "--workers", "0"])


@pytest.fixture
def archive(tmp_path):
    write_archive(tmp_path / "archive" / "train", 4)
    write_archive(tmp_path / "archive" / "valid", 2, start=100)
    write_bad_files(tmp_path / "archive" / "bad")
    return tmp_path / "archive"


def test_completed_run_exits_zero_even_with_rejections_and_strict_exits_one(
    tmp_path, archive, test_encoders
):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    report_path = tmp_path / "reports" / "run.json"
    result = ingest(
        str(archive), "--db", url, "--encoder", "stand-in", "--report", str(report_path)
    )
    assert result.exit_code == 0, result.output
    assert "ingested" in result.output and "multi-frame" in result.output
    report = json.loads(report_path.read_text())
    assert report["counts"]["ingested"] == 6 and report["counts"]["rejected"] == 5
    assert len(report["files"]) == 11
    rejected = [f for f in report["files"] if f["outcome"] == "rejected"]
    assert all(f["reason"] and f["detail"] for f in rejected)
    strict = ingest(str(archive), "--db", url, "--encoder", "stand-in", "--strict")
    assert strict.exit_code == 1
    assert "5 files rejected or in conflict" in strict.output
    with open_store(url) as store:
        assert store.count_images() == 6 and store.integrity_check() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "::not a url::"], "cannot parse database URL"),
        (["--encoder", "no-such-model"], "cannot load encoder"),
        (["--batch-size", "0"], "batch size must be at least 1"),
    ],
)
def test_fatal_errors_exit_two(tmp_path, archive, test_encoders, args, message):
    base = {"--db": f"sqlite:///{tmp_path / 's.sqlite'}", "--encoder": "stand-in"}
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    merged = [item for key, value in {**base, **pairs}.items() for item in (key, value)]
    result = ingest(str(archive), *merged)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_stand_in_needs_the_test_switch(tmp_path, archive, monkeypatch):
    monkeypatch.delenv("CHEXRETRIEVE_TEST_ENCODERS", raising=False)
    result = ingest(str(archive), "--db", f"sqlite:///{tmp_path / 's.sqlite'}", "--encoder",
                    "stand-in")  # fmt: skip
    assert result.exit_code == 2
    assert "CHEXRETRIEVE_TEST_ENCODERS=1" in " ".join(result.output.split())


def test_missing_path_exits_two_and_writes_nothing(tmp_path, test_encoders):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(tmp_path / "absent"), "--db", url, "--encoder", "stand-in")
    assert result.exit_code == 2 and "no such file or folder" in result.output
    assert not (tmp_path / "s.sqlite").exists()


def test_labels_are_stored_with_their_split(tmp_path, archive, test_encoders):
    csv_path = tmp_path / "labels.csv"
    lines = ["Path,Sex," + ",".join(FINDINGS)]
    edema = FINDINGS.index("Edema")
    for folder, count, start in (("train", 4, 0), ("valid", 2, 100)):
        for i in range(start, start + count):
            cells = [""] * len(FINDINGS)
            cells[edema] = ["1", "0", "-1", ""][i % 4]
            lines.append(f"data/{folder}/patient{i % 4}/image{i:04d}.dcm,F," + ",".join(cells))
    lines.append("data/train/patient9/missing.dcm,F," + ",".join([""] * len(FINDINGS)))
    csv_path.write_text("\n".join(lines) + "\n")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    # the CSV's paths start with data/; the archive folder plays that role
    result = ingest(str(archive), "--db", url, "--encoder", "stand-in", "--labels", str(csv_path))
    assert result.exit_code == 0, result.output
    assert "6 files matched rows" in result.output and "1 rows matched no file" in result.output
    with open_store(url) as store:
        images = store.images_frame()
        labels = store.labels_frame()
        assert sorted(images.split.value_counts().items()) == [("train", 4), ("valid", 2)]
        edema_by_name = {
            images.loc[i, "source_path"].rsplit("/", 1)[-1]: labels.loc[i, "Edema"]
            for i in labels.index
        }
        assert edema_by_name["image0000.dcm"] == 1.0 and edema_by_name["image0001.dcm"] == 0.0
        assert edema_by_name["image0002.dcm"] == -1.0
        assert str(edema_by_name["image0003.dcm"]) == "nan"  # blank = not mentioned


def test_bad_labels_file_exits_two_with_its_line(tmp_path, archive, test_encoders):
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("Path,Edema\na.dcm,maybe\n")
    result = ingest(str(archive), "--db", f"sqlite:///{tmp_path / 's.sqlite'}", "--encoder",
                    "stand-in", "--labels", str(csv_path))  # fmt: skip
    assert result.exit_code == 2
    assert "labels.csv:2: column 'Edema' has 'maybe'" in " ".join(result.output.split())


def test_a_misspelt_finding_column_is_refused_naming_the_finding_meant(tmp_path, archive,
                                                                      test_encoders):  # fmt: skip
    """Issue 34, item 14: 'Pleural Efusion' was dropped silently and the rest applied (exit 0)."""
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("Path,Sex,Edema,Pleural Efusion\ntrain/a.dcm,F,1,1\n")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(archive), "--db", url, "--encoder", "stand-in", "--labels", str(csv_path))
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "'Pleural Efusion', which is not a finding; did you mean 'Pleural Effusion'?" in text
    assert not (tmp_path / "s.sqlite").exists() or len(open_store(url).images_frame()) == 0
