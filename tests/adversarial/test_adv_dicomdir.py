"""A DICOMDIR whose ReferencedFileIDs point outside the archive, and symlinks that do the same.

Ingest does not follow DICOMDIRs: a DICOMDIR found in an archive is rejected as a non-image object,
and what it references is never opened (checked with a Python audit hook on every ``open``,
``os.listdir`` and ``os.scandir`` of the ingest run, decoding in-process). A symbolic link inside
the archive whose target lies outside it is skipped unless ``follow_symlinks`` is set.
"""

from __future__ import annotations

import shutil
import sys
import threading
import warnings
from pathlib import Path

import adv_crafting as craft
import pydicom
import pytest

from chexretrieve.dicom import pydicom_test_file
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

_WATCH: dict[str, object] = {"prefix": None, "seen": []}
_WATCH_LOCK = threading.Lock()


def _audit(event: str, args: tuple) -> None:
    prefix = _WATCH["prefix"]
    if prefix is None or event not in ("open", "os.listdir", "os.scandir"):
        return
    target = args[0] if args else None
    if isinstance(target, bytes):
        target = target.decode("utf-8", "replace")
    if isinstance(target, str | Path) and str(target).startswith(prefix):
        with _WATCH_LOCK:
            _WATCH["seen"].append((event, str(target)))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one is idle unless watching


def hostile_dicomdir(archive: Path, outside_parts: list[list[str]]) -> Path:
    """pydicom's sample DICOMDIR with its first image records pointing at ``outside_parts``."""
    ds = pydicom.dcmread(pydicom_test_file("DICOMDIR"))
    records = [r for r in ds.DirectoryRecordSequence if "ReferencedFileID" in r]
    for record, parts in zip(records, outside_parts, strict=False):
        record.ReferencedFileID = parts
    path = archive / "DICOMDIR"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the values are hostile on purpose
        ds.save_as(path)
    return path


def run_watched(archive: Path, outside: Path, tmp_path: Path, config: IngestConfig):  # noqa: ANN201
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    _WATCH["seen"] = []
    _WATCH["prefix"] = str(outside)
    try:
        report = ingest_paths([archive], store, StandInEncoder(dim=16), config)
    finally:
        _WATCH["prefix"] = None
    try:
        patients = set(store.images_frame().patient_id)
    finally:
        store.close()
    return report, patients, list(_WATCH["seen"])


@pytest.fixture
def layout(tmp_path):
    archive = tmp_path / "site" / "archive"
    outside = tmp_path / "site" / "outside"
    archive.mkdir(parents=True)
    outside.mkdir(parents=True)
    craft.write_small_radiograph(outside / "secret.dcm", 500, PatientID="OUTSIDE-SECRET")
    craft.write_small_radiograph(archive / "inside.dcm", 501, PatientID="INSIDE")
    return archive, outside


def test_dicomdir_pointing_outside_is_rejected_and_its_targets_never_opened(
    tmp_path, layout, cases
):
    archive, outside = layout
    hostile_dicomdir(
        archive,
        [
            ["..", "outside", "secret.dcm"],
            ["..", "..", "..", "..", "..", "..", "etc", "passwd"],
            [str(outside / "secret.dcm")],  # an absolute path as one component
        ],
    )
    report, patients, opened = run_watched(archive, outside, tmp_path, IngestConfig(workers=0))
    by_name = {Path(o.path).name: o for o in report.outcomes}
    dicomdir = by_name["DICOMDIR"]
    cases.check("DICOMDIR rejected as non-image", dicomdir.reason == "non-image-object",
                str(dicomdir))  # fmt: skip
    cases.check("no file outside the archive opened", opened == [], str(opened))
    cases.check("nothing from outside stored", patients == {"INSIDE"}, str(patients))
    assert dicomdir.outcome == "rejected" and dicomdir.reason == "non-image-object"
    assert "DICOMDIR" in dicomdir.detail and "not an image" in dicomdir.detail
    assert opened == [] and patients == {"INSIDE"}
    assert len(report.outcomes) == 2


def test_symlinks_out_of_the_archive_are_not_followed(tmp_path, layout, cases):
    archive, outside = layout
    (archive / "link_to_secret.dcm").symlink_to(outside / "secret.dcm")
    (archive / "link_to_folder").symlink_to(outside, target_is_directory=True)
    inner = archive / "sub"
    inner.mkdir()
    shutil.copy(archive / "inside.dcm", inner / "copy.dcm")
    (archive / "link_inside.dcm").symlink_to(inner / "copy.dcm")  # stays in the archive: fine
    report, patients, opened = run_watched(archive, outside, tmp_path, IngestConfig(workers=0))
    names = {Path(o.path).name for o in report.outcomes}
    cases.check("file symlink to outside skipped", "link_to_secret.dcm" not in names, str(names))
    cases.check("folder symlink to outside skipped", "secret.dcm" not in names, str(names))
    cases.check("symlink within the archive kept", "link_inside.dcm" in names, str(names))
    cases.check("no file outside the archive opened", opened == [], str(opened))
    assert patients == {"INSIDE"} and opened == []
    assert names == {"inside.dcm", "copy.dcm", "link_inside.dcm"}
    # an administrator who wants links followed says so
    report, patients, _ = run_watched(
        archive, outside, tmp_path, IngestConfig(workers=0, follow_symlinks=True)
    )
    cases.check("follow_symlinks=True follows", "OUTSIDE-SECRET" in patients, str(patients))
    assert "OUTSIDE-SECRET" in patients
