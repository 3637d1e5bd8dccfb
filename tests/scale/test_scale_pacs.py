"""`ingest --dicomweb` against a real Orthanc (Debian orthanc + orthanc-dicomweb) that the tests
start on 127.0.0.1 inside a private network namespace and fill with phantom DICOM files.

The client runs in the namespace too (``nsenter``), as ``scale_pacs_job.py``. Scenarios: a full
pull marks every study complete and a rerun transfers nothing; a wrong password is refused
without retries; HTTPS with a self-signed certificate (a TLS proxy in front of Orthanc, whose own
TLS crashes in Debian's 1.10) is refused by default and accepted with --ca-bundle or
--insecure; the PACS killed in the middle of a slow study leaves that study 'partial' with what
arrived stored, and after a restart on the same storage a rerun completes it with no duplicates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from scale_helpers import import_sibling_tests, make_phantom_archive, require, require_binary
from scale_orthanc import DICOMWEB_PLUGIN, ORTHANC, OrthancInNamespace

from chexretrieve.store import open_store
from chexretrieve.store.pacs import PacsLedger

pytestmark = pytest.mark.service

BIG_STUDY_SIZE = 12


@pytest.fixture(scope="module")
def orthanc(tmp_path_factory):
    require(os.geteuid() == 0, "root (network namespaces for Orthanc)")
    for binary in ("unshare", "nsenter", "ip", "openssl", ORTHANC, DICOMWEB_PLUGIN):
        require_binary(binary)
    root = tmp_path_factory.mktemp("pacs")
    archive = make_phantom_archive(root / "phantom", n=3)
    files = sorted(archive.rglob("*.dcm"))
    fixtures = import_sibling_tests("ingest", "ingest_fixtures")
    for i in range(BIG_STUDY_SIZE):
        files.append(fixtures.write_dx(root / "big" / f"{i}.dcm", 600 + i, size=48, study=500))
    files.append(fixtures.write_dx(root / "small.dcm", 700, size=48, study=700))
    server = OrthancInNamespace(root)
    try:
        server.start()
        server.upload(files)
        server.start_tls_proxy()
        server.big_study = fixtures.uid(1, 500)
        server.small_study = fixtures.uid(1, 700)
        server.n_files = len(files)
        yield server
    finally:
        server.stop()


def settings(orthanc, folder: Path, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    values = {
        "url": extra.pop("url", orthanc.dicomweb_url),
        "db": f"sqlite:///{folder / 'store.sqlite'}",
        "spool": str(folder / "spool"),
        "result": str(folder / "result.json"),
        **extra,
    }
    path = folder / f"settings-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(values))
    return path


def run_ingests(orthanc, *settings_paths: Path) -> list[dict]:
    """Run the ingests in turn in ONE client process (imports are paid once); their results."""
    done = subprocess.run(
        orthanc.job_command("ingest", *map(str, settings_paths)),
        env=orthanc.env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    results = []
    for path in settings_paths:
        result_path = Path(json.loads(path.read_text())["result"])
        assert result_path.exists(), done.stderr[-3000:]
        results.append(json.loads(result_path.read_text()))
    assert results[-1]["exit"] == done.returncode, done.stderr[-3000:]
    return results


def ledger(folder: Path, orthanc):
    store = open_store(f"sqlite:///{folder / 'store.sqlite'}")
    return store, PacsLedger(store, orthanc.dicomweb_url)


def test_full_pull_completes_every_study_and_a_rerun_transfers_nothing(orthanc, tmp_path):
    first, again, later = run_ingests(
        orthanc,
        settings(orthanc, tmp_path, result=str(tmp_path / "first.json")),
        settings(orthanc, tmp_path, result=str(tmp_path / "again.json")),
        settings(orthanc, tmp_path / "later", since="2100-01-01"),
    )
    assert first["status"] == "completed" and first["exit"] == 0
    assert first["studies_complete"] == 5 and first["studies_partial"] == 0
    assert first["transferred"] == orthanc.n_files == first["expected_instances"]
    assert first["transfer_failures"] == [] and first["retries"] == 0
    store, book = ledger(tmp_path, orthanc)
    assert store.count_images() == orthanc.n_files and store.integrity_check() == []
    studies = book.studies_frame()
    assert set(studies.status) == {"complete"} and studies.completed_at.notna().all()
    assert (studies.stored_instances == studies.expected_instances).all()
    assert set(book.instances_frame().status) == {"stored"}
    spooled = sorted((tmp_path / "spool").rglob("*.dcm"))
    assert len(spooled) == orthanc.n_files and not list((tmp_path / "spool").rglob("*.part"))
    assert set(store.gallery("stand-in:d16").metadata.source_path) == {str(p) for p in spooled}
    store.close()

    assert again["status"] == "completed" and again["studies_skipped"] == 5
    assert again["transferred"] == 0 and again["runs"] == []
    store, _ = ledger(tmp_path, orthanc)
    assert store.count_images() == orthanc.n_files
    store.close()
    assert later["status"] == "completed" and later["studies"] == {}


def test_wrong_password_and_unverified_tls_are_refused_a_ca_bundle_is_accepted(orthanc, tmp_path):
    https, small = orthanc.https_dicomweb_url, orthanc.small_study
    wrong, untrusted, trusted, insecure = run_ingests(
        orthanc,
        settings(orthanc, tmp_path / "a", env={"CHEXRETRIEVE_DICOMWEB_PASSWORD": "wrong"}),
        settings(orthanc, tmp_path / "b", url=https, studies=[small]),
        settings(orthanc, tmp_path / "c", url=https, studies=[small],
                 ca_bundle=str(orthanc.ca_bundle)),
        settings(orthanc, tmp_path / "d", url=https, studies=[small], insecure=True),
    )  # fmt: skip
    assert wrong["exit"] == 2 and "refused access (HTTP 401)" in wrong["message"]
    assert "CHEXRETRIEVE_DICOMWEB_PASSWORD" in wrong["message"]
    assert untrusted["exit"] == 2 and "TLS verification" in untrusted["message"]
    assert "--ca-bundle" in untrusted["message"]
    for accepted in (trusted, insecure):
        assert accepted["status"] == "completed", accepted.get("message")
        assert accepted["transferred"] == 1
        assert accepted["studies_complete"] == 1 and accepted["source"].startswith("https://")


def test_pacs_killed_mid_study_leaves_it_partial_and_a_rerun_completes_it(orthanc, tmp_path):
    spool = tmp_path / "spool" / orthanc.big_study
    resume = tmp_path / "pacs-killed"
    # the job holds on its 6th retrieval until the PACS is killed: mid-study on any machine
    job_settings = settings(
        orthanc, tmp_path, studies=[orthanc.big_study], hold_after=5, hold_until=str(resume)
    )
    job = subprocess.Popen(
        orthanc.job_command("ingest", str(job_settings)),
        env=orthanc.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240  # a hang guard: five instances take about a second
    while len(list(spool.rglob("*.dcm"))) < 5 and time.monotonic() < deadline:
        assert job.poll() is None, job.stderr.read()[-3000:]
        time.sleep(0.05)
    orthanc.kill()  # in the middle of the study's transfer
    resume.touch()
    try:
        assert job.wait(240) == 2
        broken = json.loads((tmp_path / "result.json").read_text())
        assert broken["status"] == "interrupted" and "seems down" in broken["message"]
        assert broken["studies"] == {orthanc.big_study: "partial"}
        store, book = ledger(tmp_path, orthanc)
        stored_before = store.count_images()
        assert 5 <= stored_before < BIG_STUDY_SIZE
        state = book.study_state(orthanc.big_study)
        assert state.status == "partial" and state.stored_instances == stored_before
        assert state.expected_instances == BIG_STUDY_SIZE
        failed = book.instances_frame().query("status == 'transfer-failed'")
        assert list(failed.reason) == ["pacs-unavailable"]
        assert book.studies_frame().completed_at.isna().all()
        store.close()
    finally:
        orthanc.start_server()  # the same storage: the PACS is back with every instance

    (resumed,) = run_ingests(orthanc, settings(orthanc, tmp_path, studies=[orthanc.big_study]))
    assert resumed["status"] == "completed"
    assert resumed["studies"] == {orthanc.big_study: "complete"}
    assert resumed["already_stored"] == stored_before
    assert resumed["transferred"] + resumed["reused_from_spool"] == BIG_STUDY_SIZE - stored_before
    store, book = ledger(tmp_path, orthanc)
    assert store.count_images() == BIG_STUDY_SIZE and store.integrity_check() == []
    gallery = store.gallery("stand-in:d16")
    assert gallery.metadata.sop_uid.is_unique and len(gallery.image_ids) == BIG_STUDY_SIZE
    assert set(book.instances_frame().status) == {"stored"}
    state = book.study_state(orthanc.big_study)
    assert (state.status, state.stored_instances) == ("complete", BIG_STUDY_SIZE)
    store.close()
    shutil.rmtree(tmp_path / "spool", ignore_errors=True)
