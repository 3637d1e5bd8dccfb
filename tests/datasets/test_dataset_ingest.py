"""`chexretrieve ingest` on fake CheXpert, MIMIC-CXR-JPG and MIMIC-CXR copies, as shipped.

Expected values are written out by hand from the fake files in dataset_fakes.py.
"""

from __future__ import annotations

import gzip
import math

import pytest
from dataset_fakes import (
    CHEXPERT_HEADER,
    CHEXPERT_TRAIN,
    D1,
    D2,
    D3,
    D4,
    D5,
    MIMIC_REPORTS,
    S,
    write_chexpert,
    write_chexpert_valid_csv,
    write_dicom,
    write_jpeg,
    write_mimic_dicom,
    write_mimic_jpg,
    write_mimic_label_files,
)
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.findings import FINDINGS
from chexretrieve.store import open_store

runner = CliRunner()
COLUMNS = ["patient_id", "study_id", "view_group", "view_position", "sex", "split"]


def ingest(*args: str):
    result = runner.invoke(
        app, ["ingest", *args, "--encoder", "stand-in", "--no-progress", "--workers", "0"]
    )
    return result


def by_path(url: str):
    """The store's dataset frame keyed by dataset_path."""
    with open_store(url) as store:
        frame = store.dataset_frame()
    return frame.set_index("dataset_path")


def row_of(frame, path: str) -> dict:
    return {c: frame.loc[path, c] for c in COLUMNS}


def test_chexpert_as_shipped(tmp_path, test_encoders):
    root = write_chexpert(tmp_path)
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(root), "--db", url)
    assert result.exit_code == 0, result.output
    assert "data set: chexpert (detected" in result.output
    frame = by_path(url)
    assert row_of(frame, f"{S}/train/patient00001/study1/view1_frontal.jpg") == {
        "patient_id": "patient00001", "study_id": "patient00001/study1",
        "view_group": "frontal", "view_position": "AP", "sex": "F", "split": "train",
    }  # fmt: skip
    assert row_of(frame, f"{S}/train/patient00002/study2/view2_lateral.jpg") == {
        "patient_id": "patient00002", "study_id": "patient00002/study2",
        "view_group": "lateral", "view_position": "", "sex": "F", "split": "train",
    }  # fmt: skip
    assert row_of(frame, f"{S}/valid/patient00003/study2/view1_frontal.jpg") == {
        "patient_id": "patient00003", "study_id": "patient00003/study2",
        "view_group": "frontal", "view_position": "PA", "sex": "M", "split": "valid",
    }  # fmt: skip
    assert frame.loc[f"{S}/train/patient00002/study2/view1_frontal.jpg", "age"] == 87.0
    assert frame.loc[f"{S}/valid/patient64541/study1/view1_frontal.jpg", "age"] == 73.0
    # the labels as written: uncertain kept as -1, blank as NaN, No Finding not a finding
    lateral = frame.loc[f"{S}/train/patient00002/study2/view2_lateral.jpg"]
    assert lateral["Edema"] == -1.0 and lateral["Lung Opacity"] == 1.0
    assert lateral["Fracture"] == 1.0 and math.isnan(lateral["Pleural Effusion"])
    assert "No Finding" not in frame.columns
    # the two views of one study are one study in the store
    with open_store(url) as store:
        images = store.images_frame().set_index("dataset_path")
        labelled = store.labels_frame(metadata=True)
    extra = ["patient_id", "study_id", "view_group", "view_position", "sex", "age", "split"]
    assert list(labelled.columns) == [*FINDINGS, *extra, "dataset_path"]
    assert len(labelled) == 6  # the image in no CSV has no labels row
    study2 = [f"{S}/train/patient00002/study2/{v}.jpg" for v in ("view1_frontal", "view2_lateral")]
    study = images.loc[study2, "study_uid"]
    assert study.nunique() == 1
    assert images["study_uid"].nunique() == 6  # 7 images, 6 studies
    # the image in no CSV: stored, unlabelled, no split
    unlisted = [p for p in frame.index if p.endswith("patient00004/study1/view1_frontal.jpg")]
    assert len(unlisted) == 1 and frame.loc[unlisted[0], "split"] == ""
    assert frame.loc[unlisted[0], "view_group"] == "" and frame.loc[unlisted[0], "patient_id"] == ""


def test_chexpert_test_labels_file_gives_the_test_split(tmp_path, test_encoders):
    root = write_chexpert(tmp_path)
    write_jpeg(root / "test/patient64741/study1/view1_frontal.jpg", 77)
    (root / "test_labels.csv").write_text(
        "Path,Atelectasis,Cardiomegaly,Edema,Pleural Effusion\n"
        "test/patient64741/study1/view1_frontal.jpg,0,1,0,1\n"
    )
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert ingest(str(root), "--db", url).exit_code == 0
    row = by_path(url).loc["test/patient64741/study1/view1_frontal.jpg"]
    assert (row["split"], row["patient_id"], row["study_id"]) == (
        "test", "patient64741", "patient64741/study1",
    )  # fmt: skip
    assert (row["Cardiomegaly"], row["Edema"], row["Pleural Effusion"]) == (1.0, 0.0, 1.0)


def test_chexpert_valid_csv_added_later_fixes_split_and_labels_idempotently(
    tmp_path, test_encoders
):
    root = write_chexpert(tmp_path, with_valid_csv=False)
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert ingest(str(root), "--db", url).exit_code == 0
    frame = by_path(url)
    valid = [p for p in frame.index if "/valid/" in p]
    assert len(valid) == 2 and set(frame.loc[valid, "split"]) == {""}
    write_chexpert_valid_csv(root)
    again = ingest(str(root), "--db", url)
    assert again.exit_code == 0, again.output
    assert (
        "images already stored: 2 labels changed, 2 splits changed, 2 other data-set fields "
        "changed, 5 unchanged" in again.output
    )
    frame = by_path(url)
    assert frame.loc[f"{S}/valid/patient64541/study1/view1_frontal.jpg", "split"] == "valid"
    assert frame.loc[f"{S}/valid/patient64541/study1/view1_frontal.jpg", "Edema"] == 1.0
    assert frame.loc[f"{S}/valid/patient00003/study2/view1_frontal.jpg", "patient_id"] == (
        "patient00003"
    )
    third = ingest(str(root), "--db", url)
    assert "0 labels changed, 0 splits changed, 0 other data-set fields changed, 7 unchanged" in (
        third.output
    )
    with open_store(url) as store:
        assert store.count_images() == 7 and store.integrity_check() == []


def test_mimic_cxr_jpg_as_shipped_with_gz_files_and_label_choice(tmp_path, test_encoders):
    root = write_mimic_jpg(tmp_path / "mimic-cxr-jpg" / "2.0.0")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(root), "--db", url)
    assert result.exit_code == 0, result.output
    assert "data set: mimic-cxr-jpg" in result.output
    assert "1 study has no row in mimic-cxr-2.0.0-chexpert.csv.gz" in result.output
    frame = by_path(url)
    path = {d: f"files/p10/p{s}/s{t}/{d}.jpg" for d, s, t in [
        (D1, "10000032", "50414267"), (D2, "10000032", "50414267"),
        (D3, "10000032", "53189527"), (D4, "10000764", "57375967"),
        (D5, "10000898", "50771383")]}  # fmt: skip
    assert row_of(frame, path[D1]) == {
        "patient_id": "10000032", "study_id": "50414267", "view_group": "frontal",
        "view_position": "PA", "sex": "", "split": "train",
    }  # fmt: skip
    assert row_of(frame, path[D2])["view_group"] == "lateral"
    assert row_of(frame, path[D2])["view_position"] == "LATERAL"
    assert row_of(frame, path[D3])["split"] == "valid"  # shipped as "validate"
    assert row_of(frame, path[D4])["split"] == "test"
    assert row_of(frame, path[D5])["view_group"] == "frontal"  # from ViewCodeSequence
    assert row_of(frame, path[D5])["view_position"] == ""
    # labels per study, CheXpert labeller by default
    assert frame.loc[path[D1], "Pleural Effusion"] == 1.0
    assert frame.loc[path[D2], "Atelectasis"] == -1.0
    assert frame.loc[path[D4], "Pneumonia"] == -1.0 and frame.loc[path[D4], "Edema"] == 1.0
    assert all(math.isnan(frame.loc[path[D5], f]) for f in ("Edema", "Pleural Effusion"))
    with open_store(url) as store:
        images = store.images_frame().set_index("dataset_path")
        assert str(images.loc[path[D1], "study_date"]) == "2180-05-06"
        assert images.loc[path[D1], "study_uid"] == images.loc[path[D2], "study_uid"]
    # the NegBio labels instead: a re-ingest changes the one study whose labels differ
    negbio = ingest(str(root), "--db", url, "--mimic-labels", "negbio")
    assert negbio.exit_code == 0, negbio.output
    assert "2 labels changed, 0 splits changed" in negbio.output
    frame = by_path(url)
    assert frame.loc[path[D1], "Pleural Effusion"] == 0.0
    assert frame.loc[path[D2], "Atelectasis"] == 1.0


def test_an_intact_mimic_cxr_jpg_download_passes_strict(tmp_path, test_encoders):
    """Issue 34, item 16: its own IMAGE_FILENAMES was counted as a rejected non-DICOM file."""
    root = write_mimic_jpg(tmp_path / "mimic-cxr-jpg" / "2.0.0")
    result = ingest(str(root), "--db", f"sqlite:///{tmp_path / 's.sqlite'}", "--strict")
    assert result.exit_code == 0, result.output
    assert "IMAGE_FILENAMES" not in result.output
    assert "rejected" not in result.output and "ingested (new images" in result.output
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        assert store.count_images() == 5


def test_mimic_cxr_dicom_with_the_jpg_label_files_and_reports(tmp_path, test_encoders):
    root = write_mimic_dicom(tmp_path / "mimic-cxr" / "2.0.0")
    labels = write_mimic_label_files(tmp_path / "jpg")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(
        str(root), "--db", url, "--labels", str(labels["chexpert"]), "--labels",
        str(labels["split"]),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "data set: mimic-cxr" in result.output
    assert "reports: 2 new, 0 changed, 0 unchanged" in result.output
    frame = by_path(url)
    path = f"files/p10/p10000032/s50414267/{D2}.dcm"
    # no metadata file given: the view comes from the DICOM header (LL), as does the sex
    assert row_of(frame, path) == {
        "patient_id": "10000032", "study_id": "50414267", "view_group": "lateral",
        "view_position": "LL", "sex": "F", "split": "train",
    }  # fmt: skip
    assert frame.loc[path, "Pleural Effusion"] == 1.0
    assert row_of(frame, f"files/p10/p10000032/s53189527/{D3}.dcm")["split"] == "valid"
    with open_store(url) as store:
        ids = store.dataset_frame().reset_index().set_index("dataset_path")["image_id"]
        image_id = int(ids[path])
        assert store.report_for_image(image_id) == MIMIC_REPORTS["50414267"].strip()
        other = int(ids[f"files/p10/p10000898/s50771383/{D5}.dcm"])
        assert store.report_for_image(other) is None  # its study has no report file
        every = [int(i) for i in ids] + [10**9]  # and an id no image has
        assert store.reports_for_images(every) == {i: store.report_for_image(i) for i in every}
    again = ingest(str(root), "--db", url, "--labels", str(labels["chexpert"]))
    assert "reports: 0 new, 0 changed, 2 unchanged" in again.output


def test_reports_csv_keyed_by_study_and_by_path(tmp_path, test_encoders):
    root = write_mimic_jpg(tmp_path / "mimic-cxr-jpg" / "2.0.0")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    reports = tmp_path / "reports.csv"
    reports.write_text("study_id,Report\n57375967,Moderate edema.\n99999999,No such study.\n")
    by_path_csv = tmp_path / "by_path.csv"
    by_path_csv.write_text(f"Path,Report\nfiles/p10/p10000032/s50414267/{D2}.jpg,Small effusion.\n")
    result = ingest(str(root), "--db", url, "--reports", str(reports), "--reports",
                    str(by_path_csv))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "reports: 2 new, 0 changed, 0 unchanged; 1 report rows matched no stored image" in (
        result.output
    )
    with open_store(url) as store:
        frame = store.dataset_frame().reset_index().set_index("dataset_path")
        d1 = int(frame.loc[f"files/p10/p10000032/s50414267/{D1}.jpg", "image_id"])
        d4 = int(frame.loc[f"files/p10/p10000764/s57375967/{D4}.jpg", "image_id"])
        assert store.report_for_image(d1) == "Small effusion."  # the same study as D2
        assert store.report_for_image(d4) == "Moderate edema."


def test_plain_dicom_fields_come_from_the_header(tmp_path, test_encoders):
    write_dicom(tmp_path / "a" / "x.dcm", 1, "PAT7", "1.2.3.4", "1.2.3.4.5", "PA", "M", "054Y")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert ingest(str(tmp_path / "a"), "--db", url).exit_code == 0
    with open_store(url) as store:
        row = store.labels_frame(metadata=True)
        assert row.empty  # unlabelled: labels_frame has no row, dataset_frame has
        frame = store.dataset_frame()
    assert frame.iloc[0][COLUMNS + ["age"]].to_dict() == {
        "patient_id": "PAT7", "study_id": "1.2.3.4", "view_group": "frontal",
        "view_position": "PA", "sex": "M", "split": "", "age": 54.0,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "chexpert"], "no train.csv or valid.csv"),
        (["--mimic-labels", "negbio", "--dataset", "mimic-cxr-jpg"], "no image list found"),
        (["--dataset", "nonsense"], "--dataset 'nonsense' is not one of"),
    ],
)
def test_bad_dataset_options_exit_two_with_a_message(tmp_path, test_encoders, args, message):
    (tmp_path / "empty").mkdir()
    result = ingest(str(tmp_path / "empty"), "--db", f"sqlite:///{tmp_path / 's.sqlite'}", *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_labels_file_for_the_other_labeller_only_is_refused(tmp_path, test_encoders):
    root = write_mimic_jpg(tmp_path / "m")
    (root / "mimic-cxr-2.0.0-chexpert.csv.gz").unlink()
    result = ingest(str(root), "--db", f"sqlite:///{tmp_path / 's.sqlite'}")
    assert result.exit_code == 2
    assert "asks for mimic-cxr-2.0.0-chexpert.csv[.gz] but only" in result.output


def test_mimic_iv_patients_file_gives_sex_and_age(tmp_path, test_encoders):
    root = write_mimic_jpg(tmp_path / "mimic-cxr-jpg" / "2.0.0")
    patients = tmp_path / "patients.csv.gz"
    patients.write_bytes(
        gzip.compress(
            b"subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod\n"
            b"10000032,F,52,2180,2014 - 2016,2180-09-09\n"
            b"10000764,M,86,2132,2014 - 2016,\n"
        )
    )
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(root), "--db", url, "--labels", str(patients))
    assert result.exit_code == 0, result.output
    frame = by_path(url)
    d1 = f"files/p10/p10000032/s50414267/{D1}.jpg"
    d4 = f"files/p10/p10000764/s57375967/{D4}.jpg"
    d5 = f"files/p10/p10000898/s50771383/{D5}.jpg"
    assert (frame.loc[d1, "sex"], frame.loc[d1, "age"]) == ("F", 52.0)
    assert (frame.loc[d4, "sex"], frame.loc[d4, "age"]) == ("M", 86.0)
    assert frame.loc[d5, "sex"] == "" and math.isnan(frame.loc[d5, "age"])  # not in the file


def test_a_part_of_a_data_set_is_ingested_with_the_root_found_above_it(tmp_path, test_encoders):
    root = write_mimic_jpg(tmp_path / "mimic-cxr-jpg" / "2.0.0")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    part = root / "files" / "p10" / "p10000764"
    result = ingest(str(part), "--db", url)
    assert result.exit_code == 0, result.output
    assert f"data set: mimic-cxr-jpg at {root}" in " ".join(result.output.split())
    frame = by_path(url)
    assert list(frame.index) == [f"files/p10/p10000764/s57375967/{D4}.jpg"]
    assert frame.iloc[0]["split"] == "test" and frame.iloc[0]["Edema"] == 1.0


@pytest.mark.parametrize("batch_size", ["1", "64"])
def test_a_copy_in_another_split_keeps_the_first_and_is_said_as_is_a_patient_in_two_splits(
    tmp_path, test_encoders, batch_size
):
    """Issue 34, item 17: a byte-identical image in train and valid was merged into one stored
    image whose split and data-set path came from different files ("6 splits changed" on a fresh
    ingest); a patient in two splits went unmentioned until the evaluation refused it."""
    import shutil

    root = write_chexpert(tmp_path)
    first = CHEXPERT_TRAIN[0][0]
    copy = f"{S}/valid/patient64542/study1/view1_frontal.jpg"
    (tmp_path / copy).parent.mkdir(parents=True)
    shutil.copyfile(tmp_path / first, tmp_path / copy)
    with open(root / "valid.csv", "a", encoding="utf-8") as handle:
        handle.write(f"{copy},Male,50,Frontal,AP" + ",0.0" * 14 + "\n")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(root), "--db", url, "--batch-size", batch_size)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "splits changed" not in text  # nothing was stored before this fresh ingest
    assert "1 file is a byte-identical copy of an image stored from another file (1 meant for " in (
        text
    )
    assert "which is in split train; this file's split valid was not applied" in text
    assert "1 patient has images in two or more splits (patient00003: train, valid)" in text
    frame = by_path(url)
    relative = first
    assert frame.loc[relative, "split"] == "train"  # the first file's, with its own path
    assert not any("patient64542" in p for p in frame.index)
    again = ingest(str(root), "--db", url)  # a re-ingest changes nothing
    assert "0 splits changed" in " ".join(again.output.split())
    assert by_path(url).loc[relative, "split"] == "train"


def test_chexpert_official_test_labels_groundtruth_csv_keyed_by_study(tmp_path, test_encoders):
    """Issue 34, item 19: the test set's groundtruth.csv (one row per Study) was not read."""
    root = write_chexpert(tmp_path)
    study = "test/patient64741/study1"
    write_jpeg(root / study / "view1_frontal.jpg", 81)
    write_jpeg(root / study / "view2_lateral.jpg", 82)
    write_jpeg(root / "test/patient64742/study1/view1_frontal.jpg", 83)
    header = ["Study", *CHEXPERT_HEADER[5:]]  # No Finding, then the 13 observations
    cells = {name: "0" for name in header[1:]}
    cells.update({"Edema": "1", "Pleural Effusion": "1"})
    lines = [",".join(header), ",".join([study, *(cells[c] for c in header[1:])]),
             ",".join(["test/patient64742/study1", *("0" for _ in header[1:])])]  # fmt: skip
    (root / "test").mkdir(exist_ok=True)
    (root / "test" / "groundtruth.csv").write_text("\n".join(lines) + "\n")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(root), "--db", url)
    assert result.exit_code == 0, result.output
    assert "test/groundtruth.csv" in " ".join(result.output.split())
    frame = by_path(url)
    for view in ("view1_frontal.jpg", "view2_lateral.jpg"):  # every image of the study
        row = frame.loc[f"{study}/{view}"]
        assert (row["split"], row["patient_id"], row["study_id"]) == (
            "test", "patient64741", "patient64741/study1",
        )  # fmt: skip
        assert (row["Edema"], row["Pleural Effusion"], row["Cardiomegaly"]) == (1.0, 1.0, 0.0)
    assert frame.loc[f"{study}/view2_lateral.jpg", "view_group"] == "lateral"
    assert frame.loc["test/patient64742/study1/view1_frontal.jpg", "Edema"] == 0.0


def test_chexpert_plus_reports_are_stored_per_study(tmp_path, test_encoders):
    """CheXpert Plus's df_chexpert_plus_240401.csv (path_to_image, report, ...) as a reports CSV
    over a CheXpert ingest: each report reaches its image's study."""
    root = write_chexpert(tmp_path)
    columns = ["path_to_image", "path_to_dcm", "frontal_lateral", "ap_pa", "deid_patient_id",
               "patient_report_date_order", "report", "section_findings", "section_impression",
               "age", "sex", "race", "ethnicity", "split"]  # fmt: skip
    image = CHEXPERT_TRAIN[3][0].removeprefix(f"{S}/")  # train/patient00003/study1/...
    text = "FINDINGS: Small left pleural effusion. IMPRESSION: Small left effusion."
    row = [image, image.replace(".jpg", ".dcm"), "Frontal", "PA", "patient00003", "1", text,
           "Small left pleural effusion.", "Small left effusion.", "41", "Male", "White",
           "Non-Hispanic/Non-Latino", "train"]  # fmt: skip
    plus = tmp_path / "df_chexpert_plus_240401.csv"
    with plus.open("w", newline="", encoding="utf-8") as handle:
        import csv

        writer = csv.writer(handle)
        writer.writerows([columns, row])
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(root), "--db", url, "--reports", str(plus))
    assert result.exit_code == 0, result.output
    assert "reports: 1 new" in " ".join(result.output.split())
    with open_store(url) as store:
        ids = store.dataset_frame().reset_index().set_index("dataset_path")["image_id"]
        assert store.report_for_image(int(ids[CHEXPERT_TRAIN[3][0]])) == text


def test_the_data_set_guide_queries_mimic_on_its_test_split_and_names_chexpert_test_files():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text()
    commands = [
        line for line in guide.splitlines() if line.startswith("chexretrieve eval retrieval")
    ]
    mimic = [c for c in commands if "mimic" in c]
    assert mimic and all("--query-split test" in c for c in mimic), mimic
    assert "groundtruth.csv" in guide and "CheXpert Plus" in guide
