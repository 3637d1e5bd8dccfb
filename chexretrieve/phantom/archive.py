"""`chexretrieve phantom make`: a phantom archive of real DICOM files with CheXpert-style CSVs.

Layout of OUT (paths in the CSVs are relative to OUT):

    train/patient0000123/study1/view1_frontal.dcm   DICOM (CR/DX, MONOCHROME1/2, some compressed)
    valid/...                                         the validation patients (about 12 %)
    labels.csv    every image: Path, Sex, Age, Frontal/Lateral, AP/PA, No Finding, 13 findings
                  (report-derived labels: 1, 0, -1 uncertain, blank = not mentioned)
    train.csv     the training rows of labels.csv
    valid.csv     the validation images with their TRUE labels (0/1), like CheXpert's
                  radiologist-labelled validation set
    reports.csv   Path, Report (one synthetic free-text report per image)
    truth.csv     Path, split, patient, the 13 true presences (0/1) and nuisance factors
    phantom.json  the settings, counts and the SYNTHETIC notice
"""

from __future__ import annotations

import csv
import io
import json
import math
import multiprocessing
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np

from chexretrieve.findings import FINDINGS
from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
from chexretrieve.phantom.generator import SYNTHETIC_NOTE, PhantomCase, generate_case
from chexretrieve.phantom.sampling import stream

CHEXPERT_COLUMNS = ("Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", "No Finding", *FINDINGS)
MANIFEST = "phantom.json"
OUTPUT_FILES = ("labels.csv", "train.csv", "valid.csv", "reports.csv", "truth.csv", MANIFEST)
OUTPUT_DIRS = ("train", "valid")
_STREAM_DICOM = 20
#: (transfer syntax, probability) of the files written
SYNTAX_MIX = (("explicit", 0.7), ("deflate", 0.1), ("rle", 0.1), ("jpeg2000", 0.1))
#: width of the field of view in millimetres (sets PixelSpacing)
FIELD_OF_VIEW_MM = 400.0


class OutputNotEmpty(ValueError):
    """The output folder holds files and --force was not given."""


def check_output(out: Path, force: bool) -> None:
    """Refuse a non-empty output folder unless `force`; with `force`, remove a previous archive's
    files (only the ones an archive writes: train/, valid/ and the CSVs)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} exists and is not a folder; choose another path")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise OutputNotEmpty(
                f"output folder {out} is not empty; choose an empty folder or pass --force to "
                "overwrite a previous phantom archive there"
            )
        for name in OUTPUT_DIRS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
        for name in OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)


def relative_path(case: PhantomCase) -> str:
    md = case.metadata
    return (
        f"{md['split']}/patient{int(md['patient_index']):07d}/"
        f"study{int(md['study_number']) + 1}/view1_frontal.dcm"
    )


def dicom_choices(seed: int, index: int) -> dict[str, str]:
    """Modality, photometric interpretation and transfer syntax of one file (deterministic)."""
    rng = stream(seed, _STREAM_DICOM, index)
    modality = "CR" if rng.random() < 0.45 else "DX"
    mono1 = rng.random() < (0.35 if modality == "CR" else 0.1)
    names = [name for name, _ in SYNTAX_MIX]
    probs = np.array([p for _, p in SYNTAX_MIX])
    syntax = names[int(rng.choice(len(names), p=probs / probs.sum()))]
    time_of_day = f"{int(rng.integers(7, 20)):02d}{int(rng.integers(0, 60)):02d}00"
    return {
        "modality": modality,
        "photometric": "MONOCHROME1" if mono1 else "MONOCHROME2",
        "transfer_syntax": syntax,
        "time": time_of_day,
    }


def dicom_metadata(case: PhantomCase, choices: dict[str, str], size: int) -> dict[str, object]:
    """DICOM keyword -> value for one phantom (see chexretrieve.dicom.write.build_dataset)."""
    from chexretrieve.dicom.write import derive_uid

    md = case.metadata
    key = ("chexretrieve-phantom", case.seed, md["patient_index"], md["study_number"])
    spacing = FIELD_OF_VIEW_MM / size
    return {
        "PatientID": md["patient_id"],
        "PatientName": md["patient_name"],
        "PatientSex": md["sex"],
        "PatientBirthDate": str(md["birth_date"]).replace("-", ""),
        "PatientAge": f"{int(md['age']):03d}Y",
        "StudyInstanceUID": derive_uid(*key, "study"),
        "SeriesInstanceUID": derive_uid(*key, "series"),
        "SOPInstanceUID": derive_uid(*key, "image"),
        "StudyDate": str(md["study_date"]).replace("-", ""),
        "StudyTime": choices["time"],
        "AccessionNumber": f"PHA{case.seed % 10000:04d}{case.index:08d}",
        "StudyID": f"{int(md['study_number']) + 1}",
        "StudyDescription": "XR CHEST 1 VIEW (SYNTHETIC PHANTOM)",
        "Modality": choices["modality"],
        "ViewPosition": md["view"],
        "Manufacturer": "chexretrieve phantom",
        "InstitutionName": "SYNTHETIC PHANTOM WORLD",
        "StationName": "PHANTOM",
        "ImageComments": SYNTHETIC_NOTE,
        "PixelSpacing": [spacing, spacing],
        "ReferringPhysicianName": "",
    }


def to_uint12(image: np.ndarray) -> np.ndarray:
    """[0, 1] float image -> 12-bit stored values (0 = black)."""
    return np.rint(np.clip(image, 0.0, 1.0) * 4095.0).astype(np.uint16)


def _label_text(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.1f}"


def case_rows(case: PhantomCase, path: str) -> dict[str, list]:
    md = case.metadata
    sex = {"M": "Male", "F": "Female"}[str(md["sex"])]
    labels = [_label_text(case.labels[name]) for name in FINDINGS]
    no_finding = "1.0" if case.no_finding else ""
    base = [path, sex, str(md["age"]), "Frontal", str(md["view"])]
    truth = ["1.0" if case.truth[name] else "0.0" for name in FINDINGS]
    no_truth = (
        "1.0" if not any(case.truth[n] for n in FINDINGS if n != "Support Devices") else "0.0"
    )
    nz = case.nuisance
    return {
        "label": [*base, no_finding, *labels],
        "valid": [*base, no_truth, *truth],
        "report": [path, case.report],
        "truth": [
            path,
            md["split"],
            md["patient_id"],
            *truth,
            nz["view"],
            f"{nz['body_size']:.3f}",
            f"{nz['rotation_deg']:.2f}",
            f"{nz['inspiration']:.3f}",
            f"{nz['exposure']:.3f}",
            f"{nz['noise']:.4f}",
            nz["marker"],
            f"{nz['crop_zoom']:.3f}",
        ],
        "split": [md["split"]],
    }


TRUTH_COLUMNS = (
    "Path",
    "split",
    "PatientID",
    *FINDINGS,
    "view",
    "body_size",
    "rotation_deg",
    "inspiration",
    "exposure",
    "noise",
    "marker",
    "crop_zoom",
)


def make_one(args: tuple[str, int, int, PhantomConfig]) -> dict[str, list]:
    """Generate and write one phantom; returns its CSV rows (runs in worker processes)."""
    from chexretrieve.dicom.write import write_radiograph

    out, seed, index, config = args
    case = generate_case(seed, index, config)
    path = relative_path(case)
    choices = dicom_choices(seed, index)
    write_radiograph(
        Path(out) / path,
        to_uint12(case.image),
        dicom_metadata(case, choices, config.size),
        transfer_syntax=choices["transfer_syntax"],
        photometric=choices["photometric"],
    )
    rows = case_rows(case, path)
    rows["dicom"] = [choices["modality"], choices["photometric"], choices["transfer_syntax"]]
    return rows


def _write_csv(path: Path, header: tuple[str, ...], rows: list[list]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _results(
    out: Path, archive: ArchiveConfig, phantom: PhantomConfig
) -> Iterator[dict[str, list]]:
    jobs = [(str(out), archive.seed, i, phantom) for i in range(archive.n)]
    if archive.workers <= 1 or archive.n < 8:
        yield from map(make_one, jobs)
        return
    # build the cached texture banks once; forked workers inherit them
    generate_case(archive.seed, 0, phantom)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with multiprocessing.get_context(method).Pool(archive.workers) as pool:
        yield from pool.imap(make_one, jobs, chunksize=8)


def write_archive(
    out: Path,
    archive: ArchiveConfig,
    phantom: PhantomConfig,
    progress: Callable[[int], None] | None = None,
    on_case: Callable[[dict[str, list]], None] | None = None,
) -> dict[str, object]:
    """Generate the archive into `out`; returns the manifest. `progress(k)` after each image;
    ``on_case(rows)`` with each image's CSV rows once its file is written (``rows["label"]``:
    its labels.csv row, Path first; ``rows["report"]``: its reports.csv row), in index order,
    while the worker processes go on generating the next ones (`make demo` ingests meanwhile)."""
    out = Path(out)
    check_output(out, archive.force)
    out.mkdir(parents=True, exist_ok=True)
    labels, valid, reports, truth, dicom = [], [], [], [], []
    for rows in _results(out, archive, phantom):
        labels.append(rows["label"])
        reports.append(rows["report"])
        truth.append(rows["truth"])
        dicom.append(rows["dicom"])
        if rows["split"][0] == "valid":
            valid.append(rows["valid"])
        if on_case is not None:
            on_case(rows)
        if progress is not None:
            progress(1)
    train = [row for row, t in zip(labels, truth, strict=True) if t[1] == "train"]
    _write_csv(out / "labels.csv", CHEXPERT_COLUMNS, labels)
    _write_csv(out / "train.csv", CHEXPERT_COLUMNS, train)
    _write_csv(out / "valid.csv", CHEXPERT_COLUMNS, valid)
    _write_csv(out / "reports.csv", ("Path", "Report"), reports)
    _write_csv(out / "truth.csv", TRUTH_COLUMNS, truth)
    patients = {row[2] for row in truth}
    valid_patients = {row[2] for row in truth if row[1] == "valid"}
    manifest = {
        "notice": f"{SYNTHETIC_NOTE}. Procedurally generated phantoms; no patient data.",
        "seed": archive.seed,
        "n_images": archive.n,
        "n_patients": len(patients),
        "n_valid_images": len(valid),
        "n_valid_patients": len(valid_patients),
        "phantom_config": asdict(phantom),
        "positives": {
            name: int(sum(row[3 + k] == "1.0" for row in truth)) for k, name in enumerate(FINDINGS)
        },
        "dicom": {
            "modality": _counts(row[0] for row in dicom),
            "photometric": _counts(row[1] for row in dicom),
            "transfer_syntax": _counts(row[2] for row in dicom),
        },
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _counts(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return dict(sorted(out.items()))
