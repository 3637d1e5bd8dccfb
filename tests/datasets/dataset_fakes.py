"""Small fake copies of CheXpert-v1.0-small, MIMIC-CXR-JPG 2.0.0 and MIMIC-CXR 2.0.0 (DICOM).

File names, column names and path shapes are those the data sets ship with; every value is
written out by hand here, so the tests compare the store against these literals, not against
anything computed by the code under test.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import numpy as np
from PIL import Image
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian

CHEXPERT_HEADER = [
    "Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", "No Finding", "Enlarged Cardiomediastinum",
    "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema", "Consolidation", "Pneumonia",
    "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices",
]  # fmt: skip
MIMIC_LABEL_HEADER = [
    "subject_id", "study_id", "Atelectasis", "Cardiomegaly", "Consolidation", "Edema",
    "Enlarged Cardiomediastinum", "Fracture", "Lung Lesion", "Lung Opacity", "No Finding",
    "Pleural Effusion", "Pleural Other", "Pneumonia", "Pneumothorax", "Support Devices",
]  # fmt: skip
MIMIC_METADATA_HEADER = [
    "dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription", "ViewPosition",
    "Rows", "Columns", "StudyDate", "StudyTime", "ProcedureCodeSequence_CodeMeaning",
    "ViewCodeSequence_CodeMeaning", "PatientOrientationCodeSequence_CodeMeaning",
]  # fmt: skip

# ------------------------------------------------------------------------------------ CheXpert
S = "CheXpert-v1.0-small"
CHEXPERT_TRAIN = [
    # Path, Sex, Age, Frontal/Lateral, AP/PA, then the observations given (others blank)
    (f"{S}/train/patient00001/study1/view1_frontal.jpg", "Female", "68", "Frontal", "AP",
     {"No Finding": "1.0", "Pneumothorax": "0.0", "Support Devices": "1.0"}),
    (f"{S}/train/patient00002/study2/view1_frontal.jpg", "Female", "87", "Frontal", "AP",
     {"Cardiomegaly": "-1.0", "Lung Opacity": "1.0", "Edema": "-1.0", "Fracture": "1.0"}),
    (f"{S}/train/patient00002/study2/view2_lateral.jpg", "Female", "87", "Lateral", "",
     {"Cardiomegaly": "-1.0", "Lung Opacity": "1.0", "Edema": "-1.0", "Fracture": "1.0"}),
    (f"{S}/train/patient00003/study1/view1_frontal.jpg", "Male", "41", "Frontal", "PA",
     {"Pleural Effusion": "1.0", "Edema": "0.0"}),
]  # fmt: skip
CHEXPERT_VALID = [  # valid.csv gives every observation as 1.0 / 0.0
    (f"{S}/valid/patient64541/study1/view1_frontal.jpg", "Male", "73", "Frontal", "AP",
     {"Edema": "1.0", "Pleural Effusion": "0.0"}),
    # patient00003 is also in train.csv: a patient in two splits
    (f"{S}/valid/patient00003/study2/view1_frontal.jpg", "Male", "42", "Frontal", "PA",
     {"Edema": "0.0", "Pleural Effusion": "1.0"}),
]  # fmt: skip
CHEXPERT_UNLISTED = f"{S}/train/patient00004/study1/view1_frontal.jpg"  # in no CSV


def write_jpeg(path: Path, seed: int, size: int = 40) -> Path:
    """A greyscale JPEG whose pixels depend on ``seed`` (distinct images, distinct UIDs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(size, size), dtype=np.uint8)
    Image.fromarray(pixels, mode="L").save(path, format="JPEG", quality=95)
    return path


def _write_csv(path: Path, header: list[str], rows: list[list[str]], gz: bool = False) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(buffer.getvalue().encode("utf-8")))
    else:
        path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def _chexpert_rows(rows) -> list[list[str]]:  # noqa: ANN001
    out = []
    for path, sex, age, view, appa, labels in rows:
        out.append([path, sex, age, view, appa, *(labels.get(c, "") for c in CHEXPERT_HEADER[5:])])
    return out


def write_chexpert(parent: Path, *, with_valid_csv: bool = True) -> Path:
    """``parent/CheXpert-v1.0-small/{train.csv, valid.csv, train/, valid/}``; returns the
    CheXpert-v1.0-small folder."""
    root = parent / S
    every = [*CHEXPERT_TRAIN, *CHEXPERT_VALID]
    for seed, (path, *_rest) in enumerate(every, start=1):
        write_jpeg(parent / path, seed)
    write_jpeg(parent / CHEXPERT_UNLISTED, 99)
    _write_csv(root / "train.csv", CHEXPERT_HEADER, _chexpert_rows(CHEXPERT_TRAIN))
    if with_valid_csv:
        write_chexpert_valid_csv(root)
    return root


def write_chexpert_valid_csv(root: Path) -> None:
    _write_csv(root / "valid.csv", CHEXPERT_HEADER, _chexpert_rows(CHEXPERT_VALID))


# ---------------------------------------------------------------------------------- MIMIC-CXR
D1 = "02aa804e-bde0afdd-112c0b34-7bc16630-4e384014"  # 10000032 / 50414267 PA
D2 = "174413ec-4ec4c1f7-34ea26b7-c5f994f8-79ef1962"  # 10000032 / 50414267 LATERAL
D3 = "2a2277a9-b0ded155-c0de8eb9-c124d10e-82c5caab"  # 10000032 / 53189527 PA (validate)
D4 = "68b5c4b1-227d0485-9cc38c3f-7b84ab51-4b472714"  # 10000764 / 57375967 AP (test)
D5 = "096052b7-d256dc40-453a102b-fa7d01c6-1b22c6b4"  # 10000898 / 50771383 no labels row
MIMIC_IMAGES = [  # dicom_id, subject_id, study_id
    (D1, "10000032", "50414267"),
    (D2, "10000032", "50414267"),
    (D3, "10000032", "53189527"),
    (D4, "10000764", "57375967"),
    (D5, "10000898", "50771383"),
]
MIMIC_CHEXPERT_LABELS = {  # (subject, study) -> values given (others blank)
    ("10000032", "50414267"): {"Pleural Effusion": "1.0", "Atelectasis": "-1.0"},
    ("10000032", "53189527"): {"No Finding": "1.0"},
    ("10000764", "57375967"): {"Edema": "1.0", "Pleural Effusion": "0.0", "Pneumonia": "-1.0"},
}
MIMIC_NEGBIO_LABELS = {
    ("10000032", "50414267"): {"Pleural Effusion": "0.0", "Atelectasis": "1.0"},
    ("10000032", "53189527"): {"No Finding": "1.0"},
    ("10000764", "57375967"): {"Edema": "1.0", "Pleural Effusion": "0.0", "Pneumonia": "-1.0"},
}
MIMIC_METADATA = [
    [D1, "10000032", "50414267", "CHEST (PA AND LAT)", "PA", "3056", "2544", "21800506",
     "213014.531", "CHEST (PA AND LAT)", "postero-anterior", "Erect"],
    [D2, "10000032", "50414267", "CHEST (PA AND LAT)", "LATERAL", "3056", "2544", "21800506",
     "213014.531", "CHEST (PA AND LAT)", "lateral", "Erect"],
    [D3, "10000032", "53189527", "CHEST (PA AND LAT)", "PA", "3056", "2544", "21800626",
     "165500.312", "CHEST (PA AND LAT)", "postero-anterior", "Erect"],
    [D4, "10000764", "57375967", "CHEST (PORTABLE AP)", "AP", "2705", "2539", "21321015",
     "080251.906", "CHEST (PORTABLE AP)", "antero-posterior", ""],
    # ViewPosition blank: the view code says frontal
    [D5, "10000898", "50771383", "CHEST (PA AND LAT)", "", "2544", "3056", "21740910",
     "152434.000", "CHEST (PA AND LAT)", "postero-anterior", "Erect"],
]  # fmt: skip
MIMIC_SPLIT = [  # dicom_id, study_id, subject_id, split; 10000032 is in train AND validate
    [D1, "50414267", "10000032", "train"],
    [D2, "50414267", "10000032", "train"],
    [D3, "53189527", "10000032", "validate"],
    [D4, "57375967", "10000764", "test"],
    [D5, "50771383", "10000898", "train"],
]
MIMIC_REPORTS = {  # study_id -> report text (made up, in MIMIC's layout and ___ convention)
    "50414267": "                  FINAL REPORT\n EXAMINATION:  CHEST (PA AND LAT)\n\n"
    " INDICATION:  ___F with cough.\n\n FINDINGS:\n\n Small right pleural effusion. No"
    " pneumothorax.\n\n IMPRESSION:\n\n Small right pleural effusion.\n",
    "57375967": "                  FINAL REPORT\n EXAMINATION:  CHEST (PORTABLE AP)\n\n"
    " FINDINGS:\n\n Moderate pulmonary edema. Dr. ___ was informed at 08:15 on ___.\n",
}


def _label_rows(table: dict) -> list[list[str]]:
    return [[s, t, *(v.get(c, "") for c in MIMIC_LABEL_HEADER[2:])] for (s, t), v in table.items()]


def write_mimic_label_files(root: Path) -> dict[str, Path]:
    """The four mimic-cxr-2.0.0-*.csv.gz files of MIMIC-CXR-JPG in ``root``."""
    return {
        "chexpert": _write_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", MIMIC_LABEL_HEADER,
                               _label_rows(MIMIC_CHEXPERT_LABELS), gz=True),
        "negbio": _write_csv(root / "mimic-cxr-2.0.0-negbio.csv.gz", MIMIC_LABEL_HEADER,
                             _label_rows(MIMIC_NEGBIO_LABELS), gz=True),
        "metadata": _write_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", MIMIC_METADATA_HEADER,
                               MIMIC_METADATA, gz=True),
        "split": _write_csv(root / "mimic-cxr-2.0.0-split.csv.gz",
                            ["dicom_id", "study_id", "subject_id", "split"], MIMIC_SPLIT, gz=True),
    }  # fmt: skip


def write_mimic_jpg(root: Path) -> Path:
    """``root`` = mimic-cxr-jpg/2.0.0: label files + files/p10/p<subject>/s<study>/<dicom>.jpg,
    and the companion files PhysioNet ships beside them: IMAGE_FILENAMES (one image path a line,
    no ending), LICENSE.txt and SHA256SUMS.txt."""
    names = []
    for seed, (dicom_id, subject, study) in enumerate(MIMIC_IMAGES, start=11):
        names.append(f"files/p{subject[:2]}/p{subject}/s{study}/{dicom_id}.jpg")
        write_jpeg(root / names[-1], seed)
    write_mimic_label_files(root)
    (root / "IMAGE_FILENAMES").write_text("\n".join(names) + "\n")
    (root / "LICENSE.txt").write_text("PhysioNet Credentialed Health Data License 1.5.0\n")
    (root / "SHA256SUMS.txt").write_text("".join(f"{'0' * 64} {n}\n" for n in names))
    return root


DICOM_HEADERS = {  # dicom_id -> (StudyInstanceUID, ViewPosition, PatientSex) in the file header
    D1: ("2.25.100000320504142670", "PA", "F"),
    D2: ("2.25.100000320504142670", "LL", "F"),
    D3: ("2.25.100000320531895270", "PA", "F"),
    D4: ("2.25.100007640573759670", "AP", "M"),
    D5: ("2.25.100008980507713830", "PA", ""),
}


def write_mimic_dicom(root: Path) -> Path:
    """``root`` = mimic-cxr/2.0.0: cxr-record-list / cxr-study-list (.csv.gz), DICOM files and
    report .txt files at files/p10/p<subject>/s<study>(.txt)."""
    records, studies = [], {}
    for seed, (dicom_id, subject, study) in enumerate(MIMIC_IMAGES, start=21):
        relative = f"files/p{subject[:2]}/p{subject}/s{study}/{dicom_id}.dcm"
        study_uid, view, sex = DICOM_HEADERS[dicom_id]
        write_dicom(root / relative, seed, subject, study_uid, f"2.25.{seed}1{seed}", view, sex)
        records.append([subject, study, dicom_id, relative])
        studies[study] = [subject, study, f"files/p{subject[:2]}/p{subject}/s{study}.txt"]
    _write_csv(root / "cxr-record-list.csv.gz", ["subject_id", "study_id", "dicom_id", "path"],
               records, gz=True)  # fmt: skip
    _write_csv(root / "cxr-study-list.csv.gz", ["subject_id", "study_id", "path"],
               list(studies.values()), gz=True)  # fmt: skip
    for study, text in MIMIC_REPORTS.items():
        subject = next(s for _, s, t in MIMIC_IMAGES if t == study)
        (root / f"files/p{subject[:2]}/p{subject}/s{study}.txt").write_text(text)
    return root


def write_dicom(
    path: Path, seed: int, patient: str, study_uid: str, sop_uid: str, view: str, sex: str,
    age: str = "",
) -> Path:  # fmt: skip
    """A 32 x 32 12-bit DX image with the given header values (pixels depend on ``seed``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 4096, size=(32, 32), dtype=np.uint16)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = sop_uid
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = sop_uid + ".1"
    ds.PatientID = patient
    ds.PatientSex = sex
    if age:
        ds.PatientAge = age
    ds.Modality = "DX"
    ds.ViewPosition = view
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = 32, 32
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.PixelData = pixels.tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path
