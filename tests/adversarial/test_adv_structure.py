"""3,000-deep nested sequences, unknown VRs, wrong VRs on the fields we use: clear outcomes.

Policy checked here: a field the reader relies on (pixel module, UIDs, frames, pixel spacing)
with a wrong or unknown VR rejects the file with a reason and a message naming the field; a
descriptive field (view, patient id, sex, age, dates, modality) with one is ignored with a warning
naming it, and never stored as a dump of some other structure.
"""

from __future__ import annotations

import struct

import adv_crafting as craft
import pydicom
import pytest
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

from chexretrieve.dicom import (
    REJECTION_REASONS,
    ReadConfig,
    RejectedFile,
    list_text_fields,
    read_radiograph,
)
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store


def outcome_of(path, config: ReadConfig | None = None):  # noqa: ANN001, ANN201
    try:
        return read_radiograph(path, config)
    except RejectedFile as exc:
        return exc


def _code_sequence() -> Sequence:
    item = Dataset()
    item.CodeValue = "399067008"
    item.CodeMeaning = "Lateral projection"
    return Sequence([item])


# (keyword, tag, wrong VR, value): required fields -> rejected naming the field
REQUIRED_WRONG = [
    ("Rows", 0x00280010, "LO", "abc"),
    ("Rows", 0x00280010, "UL", 64),
    ("Rows", 0x00280010, "FD", 32.0),
    ("Rows", 0x00280010, "SQ", "seq"),
    ("Columns", 0x00280011, "OB", b"\x20\x00"),
    ("BitsAllocated", 0x00280100, "SS", -16),
    ("BitsStored", 0x00280101, "FL", 12.0),
    ("PixelRepresentation", 0x00280103, "LO", "0"),
    ("SamplesPerPixel", 0x00280002, "DS", "1.5"),
    ("PhotometricInterpretation", 0x00280004, "US", 2),
    ("StudyInstanceUID", 0x0020000D, "SQ", "seq"),
    ("SeriesInstanceUID", 0x0020000E, "OB", b"\x01\x02\x03\x04"),
    ("SOPInstanceUID", 0x00080018, "US", 7),
    ("NumberOfFrames", 0x00280008, "LO", "many"),
    ("PixelSpacing", 0x00280030, "US", 3),
    ("PixelSpacing", 0x00280030, "SQ", "seq"),
]
# descriptive fields -> read, the field ignored (None) with a warning naming it
DESCRIPTIVE_WRONG = [
    ("ViewPosition", "view_position", 0x00185101, "SQ", "seq"),
    ("PatientID", "patient_id", 0x00100020, "SQ", "seq"),
    ("Manufacturer", "manufacturer", 0x00080070, "SQ", "seq"),
    ("BodyPartExamined", "body_part", 0x00180015, "SQ", "seq"),
    ("PatientSex", "patient_sex", 0x00100040, "US", 1),
    ("PatientAge", "patient_age_years", 0x00101010, "FD", 65.0),
]


def _with_element(tmp_path, name, tag, vr, value):  # noqa: ANN001, ANN202
    base = craft.write_small_radiograph(tmp_path / f"{name}.base.dcm", 9)
    ds = pydicom.dcmread(base)
    ds.PatientBirthDate = ""  # so an ignored PatientAge is not recomputed from the birth date
    ds.add_new(tag, vr, _code_sequence() if value == "seq" else value)
    path = tmp_path / f"{name}.dcm"
    ds.save_as(path)
    return path


def test_wrong_vrs_on_fields_we_rely_on_are_rejected_naming_the_field(tmp_path, cases):
    failures = []
    for keyword, tag, vr, value in REQUIRED_WRONG:
        path = _with_element(tmp_path, f"{keyword}_{vr}", tag, vr, value)
        got = outcome_of(path)
        ok = isinstance(got, RejectedFile) and got.reason in REJECTION_REASONS
        ok = ok and keyword in got.message
        cases.check(f"{keyword} as {vr}", ok, str(got)[:200])
        if not ok:
            failures.append((keyword, vr, str(got)[:200]))
    assert not failures


def test_wrong_vrs_on_descriptive_fields_are_ignored_with_a_warning(tmp_path, cases):
    failures = []
    for keyword, attribute, tag, vr, value in DESCRIPTIVE_WRONG:
        path = _with_element(tmp_path, f"{keyword}_{vr}", tag, vr, value)
        got = outcome_of(path)
        ok = (
            not isinstance(got, RejectedFile)
            and getattr(got.metadata, attribute) is None
            and any(keyword in w for w in got.warnings)
        )
        cases.check(f"{keyword} as {vr}", ok, str(getattr(got, "warnings", got))[:200])
        if not ok:
            failures.append((keyword, vr, got))
    # Modality as a sequence is ignored and inferred from the SOP class (CR), with both notes
    got = outcome_of(_with_element(tmp_path, "Modality_SQ", 0x00080060, "SQ", "seq"))
    ok = not isinstance(got, RejectedFile) and got.metadata.modality == "CR"
    cases.check("Modality as SQ", ok, str(got)[:200])
    assert not failures and ok


@pytest.mark.parametrize(
    ("case", "group", "element", "old", "new", "expected"),
    [
        ("Rows ZZ", 0x0028, 0x0010, b"US", b"ZZ", ("invalid-field", "Rows")),
        ("Rows U1", 0x0028, 0x0010, b"US", b"U1", ("invalid-field", "Rows")),
        ("Rows lowercase us", 0x0028, 0x0010, b"US", b"us", ("rejected", None)),
        ("Rows NUL NUL", 0x0028, 0x0010, b"US", b"\0\0", ("rejected", None)),
        ("StudyInstanceUID XX", 0x0020, 0x000D, b"UI", b"XX", ("invalid-field", "StudyInstance")),
        ("SOPInstanceUID QQ", 0x0008, 0x0018, b"UI", b"QQ", ("invalid-field", "SOPInstanceUID")),
        ("Modality QQ", 0x0008, 0x0060, b"CS", b"QQ", ("read", "Modality")),
        ("PatientID ZZ", 0x0010, 0x0020, b"LO", b"ZZ", ("read", "PatientID")),
    ],
)
def test_unknown_vrs(tmp_path, cases, case, group, element, old, new, expected):
    data = craft.write_small_radiograph(tmp_path / "base.dcm", 9).read_bytes()
    path = tmp_path / "unknown.dcm"
    path.write_bytes(craft.with_vr(data, group, element, old, new))
    got = outcome_of(path)
    want, named = expected
    if want == "read":
        ok = not isinstance(got, RejectedFile) and any(named in w for w in got.warnings)
    elif want == "rejected":
        ok = isinstance(got, RejectedFile) and got.reason in REJECTION_REASONS
    else:
        ok = isinstance(got, RejectedFile) and got.reason == want and named in got.message
    cases.check(case, ok, str(getattr(got, "warnings", got))[:200])
    assert ok, got


def test_unknown_vr_on_a_private_element_is_tolerated(tmp_path, cases):
    data = craft.write_small_radiograph(tmp_path / "base.dcm", 9).read_bytes()
    private = craft.element_bytes(0x0009, 0x0010, b"LO", b"ADV ") + struct.pack(
        "<HH2sH", 0x0009, 0x1001, b"ZZ", 4
    ) + b"abcd"  # fmt: skip
    path = tmp_path / "private.dcm"
    path.write_bytes(craft.insert_before_pixels(data, private))
    got = outcome_of(path)
    cases.check("private element with VR ZZ", not isinstance(got, RejectedFile), str(got)[:200])
    assert got.pixels.shape == (32, 32)


@pytest.mark.parametrize("syntax", ["explicit", "implicit", "deflate"])
def test_3000_deep_sequences_are_too_deep_and_10_are_fine(tmp_path, cases, syntax):
    deep = craft.deeply_nested(tmp_path, f"deep_{syntax}.dcm", 3000, syntax)
    shallow = craft.deeply_nested(tmp_path, f"shallow_{syntax}.dcm", 10, syntax)
    got_deep, got_shallow = outcome_of(deep), outcome_of(shallow)
    ok_deep = isinstance(got_deep, RejectedFile) and got_deep.reason == "too-deep"
    cases.check(f"3000 deep {syntax}", ok_deep, str(got_deep)[:200])
    cases.check(f"10 deep {syntax}", not isinstance(got_shallow, RejectedFile), str(got_shallow))
    with pytest.raises(RejectedFile) as listing:
        list_text_fields(deep)
    cases.check(f"3000 deep {syntax} text listing", listing.value.reason == "too-deep")
    assert ok_deep and "deep" in got_deep.message
    assert got_shallow.pixels.shape == (32, 32)
    assert listing.value.reason == "too-deep"


def test_deep_and_wrong_vr_files_through_ingest_reject_alone(tmp_path, cases):
    archive = tmp_path / "archive"
    archive.mkdir()
    for syntax in ("explicit", "implicit", "deflate"):
        craft.deeply_nested(archive, f"deep_{syntax}.dcm", 3000, syntax)
    for keyword, tag, vr, value in REQUIRED_WRONG[:4]:
        _with_element(archive, f"wrong_{keyword}_{vr}", tag, vr, value)
    for path in archive.glob("*.base.dcm"):
        path.unlink()
    good = [craft.write_small_radiograph(archive / f"good{i}.dcm", 300 + i) for i in range(3)]
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    try:
        report = ingest_paths([archive], store, StandInEncoder(dim=16),
                              IngestConfig(workers=1, batch_size=4, file_timeout_s=30))  # fmt: skip
        stored = store.count_images()
    finally:
        store.close()
    for outcome in report.outcomes:
        want_ok = outcome.path.endswith(tuple(p.name for p in good))
        ok = (outcome.outcome == "ingested") if want_ok else bool(
            outcome.outcome == "rejected" and outcome.reason in ("too-deep", "invalid-field")
        )  # fmt: skip
        cases.check(f"ingest {outcome.path.rsplit('/', 1)[-1]}", ok, str(outcome))
    assert report.status == "completed" and report.counts["rejected"] == 7
    assert stored == 3 and report.worker_restarts == 0
