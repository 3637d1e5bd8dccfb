"""A DICOM SR beside the images: its text is stored as the study's report at ingest."""

from __future__ import annotations

from dataset_fakes import write_dicom
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.dicom.sr_text import read_sr_text
from chexretrieve.store import open_store

BASIC_TEXT_SR = "1.2.840.10008.5.1.4.1.1.88.11"


def _code(meaning: str) -> Sequence:
    code = Dataset()
    code.CodeValue, code.CodingSchemeDesignator, code.CodeMeaning = "121071", "DCM", meaning
    return Sequence([code])


def write_sr(path, study_uid: str) -> None:
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = BASIC_TEXT_SR
    meta.MediaStorageSOPInstanceUID = "1.2.3.9.1"
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID, ds.SOPInstanceUID = BASIC_TEXT_SR, "1.2.3.9.1"
    ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.Modality = study_uid, "1.2.3.9", "SR"
    ds.PatientID = "PAT7"
    ds.ValueType = "CONTAINER"
    ds.ConceptNameCodeSequence = _code("Chest X-ray report")
    findings = Dataset()
    findings.ValueType, findings.ConceptNameCodeSequence = "CONTAINER", _code("Findings")
    text = Dataset()
    text.ValueType, text.ConceptNameCodeSequence = "TEXT", _code("Finding")
    text.TextValue = "Small left   pleural effusion."
    impression = Dataset()
    impression.ValueType = "TEXT"
    impression.TextValue = "No pneumothorax."
    findings.ContentSequence = Sequence([text])
    ds.ContentSequence = Sequence([findings, impression])
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)


def test_sr_text_is_read_in_document_order(tmp_path):
    write_sr(tmp_path / "sr.dcm", "1.2.3.4")
    assert read_sr_text(tmp_path / "sr.dcm") == (
        "1.2.3.4",
        "FINDINGS\nFinding: Small left pleural effusion.\nNo pneumothorax.",
    )
    write_dicom(tmp_path / "image.dcm", 1, "PAT7", "1.2.3.4", "1.2.3.4.5", "PA", "M")
    assert read_sr_text(tmp_path / "image.dcm") is None  # an image, not a report


def test_ingest_stores_the_sr_text_as_the_study_report(tmp_path, test_encoders):
    write_dicom(tmp_path / "a" / "image.dcm", 1, "PAT7", "1.2.3.4", "1.2.3.4.5", "PA", "M")
    write_sr(tmp_path / "a" / "report.dcm", "1.2.3.4")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = CliRunner().invoke(
        app, ["ingest", str(tmp_path / "a"), "--db", url, "--encoder", "stand-in",
              "--no-progress", "--workers", "0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "reports: 1 new, 0 changed, 0 unchanged" in result.output
    with open_store(url) as store:
        image_id = int(store.dataset_frame().index[0])
        assert store.report_for_image(image_id) == (
            "FINDINGS\nFinding: Small left pleural effusion.\nNo pneumothorax."
        )
