"""CheXpert-format labels: parsing policy, errors with file and line, path matching rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from chexretrieve.findings import FINDINGS
from chexretrieve.ingest.labels import read_label_csv

HEADER = "Path,Sex,Age,Frontal/Lateral,AP/PA,No Finding," + ",".join(FINDINGS)


def write_csv(tmp_path: Path, lines: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "labels.csv"
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    return path


def row(path: str, values: dict[str, str] | None = None) -> str:
    values = values or {}
    cells = [path, "Female", "60", "Frontal", "PA", ""]
    cells += [values.get(f, "") for f in FINDINGS]
    return ",".join(cells)


def test_values_policy_and_ignored_columns(tmp_path):
    csv_path = write_csv(
        tmp_path,
        [
            row("CheXpert-v1.0-small/train/patient1/study1/view1_frontal.jpg",
                {"Edema": "1.0", "Cardiomegaly": "-1.0", "Fracture": "0"}),
            row("CheXpert-v1.0-small/valid/patient2/study1/view1_frontal.jpg"),
            row("other/p3.dcm", {"Edema": "0.0"}),
        ],
    )  # fmt: skip
    table = read_label_csv(csv_path)
    assert table.ignored_columns == ("Sex", "Age", "Frontal/Lateral", "AP/PA", "No Finding")
    first, second, third = table.rows
    assert first.labels["Edema"] == 1.0 and first.labels["Cardiomegaly"] == -1.0
    assert first.labels["Fracture"] == 0.0 and first.labels["Pneumothorax"] is None
    assert set(first.labels) == set(FINDINGS)
    assert first.split == "train" and second.split == "valid" and third.split is None
    assert all(value is None for value in second.labels.values())


@pytest.mark.parametrize(
    ("header", "lines", "message"),
    [
        ("Image,Edema", ["a.dcm,1"], "has no 'Path' column"),
        ("Path,Sex", ["a.dcm,F"], "has no finding columns"),
        ("Path,Edema", ["a.dcm,1", "b.dcm,2"], r"labels.csv:3: column 'Edema' has '2'"),
        ("Path,Edema", ["a.dcm,yes"], r"labels.csv:2: column 'Edema' has 'yes'"),
        ("Path,Edema", ["a.dcm,1", "./a.dcm,0"], "already appeared on line 2"),
        ("Path,Edema", ["a.dcm,1,0"], r"labels.csv:2: 3 fields, but the header has 2"),
        ("Path,Edema,Split", ["a.dcm,1,holdout"], "Split 'holdout' is not one of"),
        ("Path,Edema,edema", ["a.dcm,1,1"], "has the column 'Edema' twice"),
        ("Path,Edema", [",1"], "empty Path"),
    ],
)
def test_bad_label_files_name_file_line_and_column(tmp_path, header, lines, message):
    with pytest.raises(ValueError, match=message):
        read_label_csv(write_csv(tmp_path, lines, header))


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        read_label_csv(empty)
    with pytest.raises(ValueError, match="cannot read labels file"):
        read_label_csv(tmp_path / "absent.csv")


def test_split_column_wins_over_the_path(tmp_path):
    table = read_label_csv(
        write_csv(tmp_path, ["train/a.dcm,1,validation"], header="Path,Edema,Split")
    )
    assert table.rows[0].split == "valid"


def test_matching_rules(tmp_path):
    csv_path = write_csv(
        tmp_path,
        [
            row("train/p1/s1/view1.dcm", {"Edema": "1"}),
            row("CheXpert-v1.0-small/train/p2/s1/view1.dcm", {"Edema": "0"}),
            row("s1/view2.dcm", {"Edema": "-1"}),
            row("x/view9.dcm"),
            row("y/view9.dcm"),
        ],
    )
    table = read_label_csv(csv_path)
    root = tmp_path / "archive"
    # 1. relative to the folder argument
    assert table.match(root / "train/p1/s1/view1.dcm", root).labels["Edema"] == 1.0
    # 3. a prefix learnt from the rows (the CSV names the dataset folder, the argument is inside)
    inside = root / "CheXpert-v1.0-small"
    assert table.match(inside / "train/p2/s1/view1.dcm", inside).labels["Edema"] == 0.0
    # 2. the row's Path is a trailing part of the absolute path
    assert table.match(root / "deep/p9/s1/view2.dcm", root).labels["Edema"] == -1.0
    # ambiguous (two rows end with view9.dcm) and unknown files stay unlabelled
    assert table.match(root / "view9.dcm", root) is None
    assert table.match(root / "train/p7/s1/view1.dcm", root) is None
    assert table.unmatched_rows == 2


@pytest.mark.parametrize(
    ("column", "meant"),
    [("Pleural Efusion", "Pleural Effusion"), ("Cardiomegally", "Cardiomegaly"),
     ("pneumothrax", "Pneumothorax"), ("Support Device", "Support Devices"),
     ("Lung_Opacities", "Lung Opacity")],
)  # fmt: skip
def test_a_column_that_nearly_spells_a_finding_is_refused(tmp_path, column, meant):
    with pytest.raises(ValueError, match=f"did you mean '{meant}'"):
        read_label_csv(write_csv(tmp_path, ["a.dcm,1,1"], header=f"Path,Edema,{column}"))


def test_the_public_files_other_columns_are_still_ignored(tmp_path):
    """CheXpert's train/valid CSVs, its test groundtruth.csv and MIMIC-CXR-JPG's tables name
    columns that are no findings; none of them is taken for a misspelt one."""
    header = "Path,Study,Sex,Age,Frontal/Lateral,AP/PA,No Finding,subject_id,study_id,dicom_id,"
    header += "ViewPosition,Comment,Edema"
    table = read_label_csv(write_csv(tmp_path, ["a.dcm" + ",x" * 11 + ",1"], header=header))
    assert table.rows[0].labels["Edema"] == 1.0 and "Comment" in table.ignored_columns
