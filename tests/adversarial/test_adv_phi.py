"""Issue 33 item 5: ``anchors import-reports`` must keep PHI out of the corpus, as an outsider
would try to get it in.

A store holds DICOM radiographs of 12 patients (names, ids, accession numbers, study dates in
their headers) and 60 synthetic reports that plant identifiers of every HIPAA Safe Harbor kind
(Faker's, not the scrubber's: ``tests/anchors/phi_corpus.py``), the archive's own in other cases
and orders, and the fragments the audit found (``ACC2021-___``, ``___EG4-TE5-MK73``). The
command-line import runs; the corpus file is then read with PyYAML and each planted identifier is
one case: none of its words may be left in any sentence. The corpus may not be written outside the
private folder by any path (``..``, a symbolic link into the repository).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from anchors_testing import import_store_reports
from phi_corpus import ARCHIVE_KINDS, context_words, make_corpus, survivors
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The corpus, the store's URL, the private folder and the written corpus sentences."""
    base = tmp_path_factory.mktemp("phi")
    corpus = make_corpus(60, seed=7)
    archive = base / "archive"
    archive.mkdir()
    rng = np.random.default_rng(0)
    for i, patient in enumerate(corpus.patients):
        study = derive_uid("phi-test", i)
        write_radiograph(
            archive / f"p{i}.dcm",
            (rng.random((64, 64)) * 4000).astype(np.uint16),
            {
                "PatientID": patient["id"],
                "PatientName": patient["name"],
                "AccessionNumber": patient["accession"],
                "StudyDate": patient["date"],
                "StudyInstanceUID": study,
                "SeriesInstanceUID": derive_uid(study, "s"),
                "SOPInstanceUID": derive_uid(study, "i"),
                "Modality": "CR",
                "ReferringPhysicianName": "WHITAKER^HELENA",
            },  # fmt: skip
        )
    url = f"sqlite:///{base / 'store.sqlite'}"
    with open_store(url) as store:
        ingest_paths([archive], store, StandInEncoder(dim=16), IngestConfig(workers=0))
        store.put_reports({f"r{i:03d}": (text, None) for i, text in enumerate(corpus.reports)})
    private = base / "private"
    import_store_reports(url, private, "phi")
    data = yaml.safe_load((private / "broad" / "reports-phi-v1.yaml").read_text("utf-8"))
    sentences = [entry["text"] for entry in data["sentences"]]
    return corpus, url, private, sentences, data


def test_no_planted_identifier_survives_into_the_corpus(imported, cases):
    corpus, _, _, sentences, _ = imported
    text = " ".join(sentences)
    clinical = context_words(corpus)  # "4" of "4 cm" elsewhere is not a date's "4"
    kinds: dict[str, list[int]] = {}
    for item in corpus.planted:
        left = [w for w in survivors(item, text) if w.casefold() not in clinical]
        cases.check(f"{item.kind}: {item.value!r}", not left, f"left: {left}")
        kinds.setdefault(item.kind, []).append(not left)
    for kind, kept in kinds.items():
        cases.figure(f"recall {kind}", sum(kept) / len(kept))
    assert set(kinds) >= set(ARCHIVE_KINDS) and len(kinds) == 26
    leaks = [k for k, kept in kinds.items() if not all(kept)]
    assert leaks == [], leaks


def test_the_archive_header_names_and_every_spelling_of_its_dates_are_gone(imported, cases):
    corpus, _, _, sentences, data = imported
    text = " ".join(sentences).casefold()
    for patient in corpus.patients:
        for part in patient["name"].split("^"):
            cases.check(f"name part {part}", part.casefold() not in text.split())
        day: dt.date = patient["date"]
        for spelling in (day.isoformat(), day.strftime("%m/%d/%Y"), day.strftime("%Y%m%d")):
            cases.check(f"date {spelling}", spelling not in text)
    # the referring physician's name came from the headers only
    cases.check("header-only name", "whitaker" not in text and "helena" not in text)
    scrubber = data["sources"]["reports"]["parameters"]["scrubber"]
    assert "philter-lite 0.6.0" in scrubber and "archive identifiers" in scrubber


def test_the_corpus_never_leaves_the_private_folder(imported, cases, tmp_path, monkeypatch):
    _, url, private, _, _ = imported
    monkeypatch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(private))
    link = private / "into-repository"
    os.symlink(REPO, link)
    try:
        tries = {
            "dot-dot out of the private folder": private / ".." / "elsewhere",
            "a symbolic link into the repository": link / "corpus",
            "the repository's anchors folder": REPO / "anchors",
            "a shared folder": tmp_path / "shared",
        }
        for name, out in tries.items():
            done = runner.invoke(
                app, ["anchors", "import-reports", "--db", url, "--name", "leak", "--out", str(out)]
            )
            written = list(out.rglob("reports-leak*")) if out.exists() else []
            cases.check(name, done.exit_code == 2 and not written, done.output[-300:])
        assert not list(REPO.rglob("reports-leak*"))
    finally:
        link.unlink()
