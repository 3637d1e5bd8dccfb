"""The audit trail (who, when, which query, which studies were viewed or exported) and no patient
data in application output or logs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import adv_crafting as craft
import pytest
from adv_faults import deny_inserts_into, tracked_sqlite_connections
from adv_support import REPO

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit import AuditConfig, AuditLog, open_audit_log, verify_audit_file
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, IngestError, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.output import print_result, result_as_dict
from chexretrieve.search.service import SearchRequest
from chexretrieve.store import open_store
from chexretrieve.ui.compare import CompareViewer
from chexretrieve.ui.handlers import CaseLookup, SearchSettings

#: identifying values written into every test file; none may appear in any output or log
PHI = {
    "PatientName": "Zyxwv^Phimarker",
    "PatientID": "PHI-ID-778899",
    "PatientBirthDate": "19010203",
    "AccessionNumber": "ACC-PHI-4455",
    "InstitutionName": "Phimarker General Hospital",
    "ReferringPhysicianName": "Drphimarker^Q",
}
MARKERS = ("Phimarker", "PHI-ID-778899", "19010203", "ACC-PHI-4455")


def phi_archive(folder: Path, n: int = 12) -> list[Path]:
    paths = [
        craft.write_small_radiograph(
            folder / f"case{i:02d}.dcm",
            700 + i,
            **PHI,
            StudyInstanceUID=craft.derive_uid("phi-study", i // 2),
        )
        for i in range(n)
    ]
    # a conflict (same SOP UID, other pixels) and a rejected file carrying the same identifiers
    craft.write_small_radiograph(
        folder / "conflict.dcm",
        900,
        **PHI,
        SOPInstanceUID=craft.radiograph_metadata(700)["SOPInstanceUID"],
    )
    truncated = craft.write_small_radiograph(folder / "cut.dcm", 901, **PHI)
    truncated.write_bytes(truncated.read_bytes()[:-500])
    return paths


def leaks(text: str) -> list[str]:
    return [marker for marker in MARKERS if marker in text]


@pytest.fixture
def archive_store(tmp_path):
    archive = tmp_path / "archive"
    phi_archive(archive)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    ingest_paths([archive], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    yield tmp_path, archive, url, store
    store.close()


def _service(store, tmp_path, audit):  # noqa: ANN001, ANN202
    """The search service as every entry point builds it (chexretrieve.app), over ``store``."""
    config = AppConfig(
        store.config.url,
        search=SearchConfig(feature_cache_dir=tmp_path / "features"),
        audit=AuditConfig(path=audit.path) if audit is not None else AuditConfig(enabled=False),
    )
    return open_search_app(config, store=store, encoder=StandInEncoder(dim=32)).service


def test_searches_views_and_exports_are_audited_with_who_when_what(archive_store, cases):
    tmp_path, _, _, store = archive_store
    audit = AuditLog(tmp_path / "audit" / "trail.jsonl")
    service = _service(store, tmp_path, audit)
    lookup = CaseLookup(service, store, thumbnail_px=32, audit=audit)
    case_id = int(service.gallery.image_ids[0])
    query = lookup.load_case(case_id, user="dr.alice")
    settings = SearchSettings(finding="Edema", geometry="softmax", text="right base")
    page = lookup.search(query, settings, user="dr.alice")
    lookup.result_details(page.image_ids[0], user="dr.alice")
    # opening a result in the compare viewer is a view of its study
    CompareViewer(lookup, viewer_px=256).open(query, page.image_ids[1], settings, user="dr.alice")
    service.search(SearchRequest(finding="Pneumothorax", case_id=case_id, top_k=3), user="bob")
    audit.export(
        "bob",
        [page.image_ids[0]],
        [page.result.hits[0].metadata["study_uid"]],
        destination="report.pdf",
    )
    entries = audit.entries()
    actions = [(e["user"], e["action"]) for e in entries]
    study_of = {
        int(i): service.gallery.metadata.loc[int(i), "study_uid"] for i in service.gallery.image_ids
    }
    search = entries[1]
    checks = {
        "order of actions": actions
        == [
            ("dr.alice", "view"),
            ("dr.alice", "search"),
            ("dr.alice", "view"),
            ("dr.alice", "view"),
            ("bob", "search"),
            ("bob", "export"),
        ],
        "query recorded": search["query"]["finding"] == "Edema"
        and search["query"]["case"] == case_id
        and search["query"]["case_study"] == study_of[case_id]
        and search["query"]["text"] == "right base",
        "every shown study recorded": [r["image"] for r in search["results"]]
        == list(page.image_ids)
        and all(r["study"] == study_of[r["image"]] for r in search["results"]),
        "views name the study": entries[0]["study"] == study_of[case_id]
        and entries[2]["what"] == "details"
        and entries[3]["what"] == "viewer"
        and entries[3]["image"] == page.image_ids[1]
        and entries[3]["study"] == study_of[page.image_ids[1]],
        "export recorded": entries[5]["items"][0]["image"] == page.image_ids[0]
        and entries[5]["destination"] == "report.pdf",
        "UTC timestamps, sequence": all(e["time"].endswith("+00:00") for e in entries)
        and [e["seq"] for e in entries] == [1, 2, 3, 4, 5, 6],
        "no patient data in the audit trail": not leaks(audit.path.read_text()),
        "file mode 0600": (audit.path.stat().st_mode & 0o777) == 0o600,
        "chain intact": verify_audit_file(audit.path) == [],
    }
    for name, ok in checks.items():
        cases.check(name, ok, json.dumps(entries)[:300])
    assert all(checks.values()), {k: v for k, v in checks.items() if not v}


def test_tampering_is_detected_and_writers_never_interleave(tmp_path, cases):
    path = tmp_path / "trail.jsonl"
    audit = AuditLog(path)

    def writer(name: str) -> None:
        for i in range(50):
            audit.view(name, i, f"1.2.3.{i}", what="details")

    threads = [threading.Thread(target=writer, args=(f"user{k}",)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # a second process appends to the same file while this one holds it open
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "from chexretrieve.audit import AuditLog; import sys; "
            "a = AuditLog(sys.argv[1]); [a.view('proc', i, None, 'query') "
            "for i in range(20)]",
            str(path),
        ],
        cwd=REPO,
        timeout=120,
    )
    intact = other.returncode == 0 and verify_audit_file(path) == []
    count = len(path.read_text().splitlines())
    cases.check("8 threads + 1 process: 420 whole lines, chain intact", intact and count == 420)
    lines = path.read_text().splitlines()
    edited = list(lines)
    edited[100] = edited[100].replace('"user', '"USER', 1)
    (tmp_path / "edited.jsonl").write_text("\n".join(edited) + "\n")
    removed = lines[:200] + lines[201:]
    (tmp_path / "removed.jsonl").write_text("\n".join(removed) + "\n")
    found_edit = verify_audit_file(tmp_path / "edited.jsonl")
    found_removal = verify_audit_file(tmp_path / "removed.jsonl")
    cases.check("an edited line is detected", any("line 102" in p for p in found_edit))
    cases.check("a removed line is detected", any("line 201" in p for p in found_removal))
    assert intact and count == 420
    assert any("line 102" in p for p in found_edit) and any("line 201" in p for p in found_removal)


def test_audit_fails_closed_and_can_be_configured(tmp_path, monkeypatch, cases):
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "env" / "a.jsonl"))
    assert open_audit_log().path == tmp_path / "env" / "a.jsonl"
    assert open_audit_log(AuditConfig(enabled=False)) is None
    audit = AuditLog(tmp_path / "trail.jsonl")
    audit.path.chmod(0o400)
    os.chmod(tmp_path, 0o500)
    try:
        refused = None
        if os.geteuid() == 0:  # root writes anyway: make the file a folder's twin instead
            audit.path = tmp_path / "missing-folder" / "trail.jsonl"
        try:
            audit.view("eve", 1, "1.2", what="details")
        except ValueError as exc:
            refused = str(exc)
    finally:
        os.chmod(tmp_path, 0o700)
    ok = refused is not None and "refused" in refused and "audit trail" in refused
    cases.check("an unwritable audit trail refuses the action", ok, str(refused))
    assert ok


def test_no_patient_data_in_application_output_or_logs(archive_store, caplog, capsys, cases):
    tmp_path, archive, url, store = archive_store
    caplog.set_level(logging.DEBUG)
    outputs: dict[str, str] = {}
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1", "COLUMNS": "200"}
    report = tmp_path / "report.json"
    db2 = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    ingest = subprocess.run(
        [
            sys.executable,
            "-m",
            "chexretrieve",
            "ingest",
            str(archive),
            "--db",
            db2,
            "--encoder",
            "stand-in",
            "--workers",
            "1",
            "--no-progress",
            "--report",
            str(report),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outputs["ingest CLI output"] = ingest.stdout + ingest.stderr
    outputs["ingest JSON report"] = report.read_text()
    service = _service(store, tmp_path, None)
    lookup = CaseLookup(service, store, thumbnail_px=32)
    case_id = int(service.gallery.image_ids[0])
    query = lookup.load_case(case_id)
    geo = lookup.search(query, SearchSettings(finding="Edema"), baseline=True)
    outputs["UI query details"] = lookup.query_details(query, "Edema")
    outputs["UI result details"] = lookup.result_details(geo.image_ids[0], finding="Edema")
    outputs["UI tables"] = geo.html + lookup.explain(
        query, SearchSettings("Edema"), geo.image_ids[0]
    )
    shown = CompareViewer(lookup, viewer_px=256).open(
        query, geo.image_ids[0], SearchSettings("Edema")
    )
    outputs["UI compare viewer"] = shown.title + shown.images_html + shown.details_html
    outputs["UI case list"] = repr(lookup.case_choices())
    result = service.search(SearchRequest(finding="Edema", case_id=case_id, explain=True))
    print_result(result, explain=True)  # what `chexretrieve search` prints
    outputs["search CLI table"] = capsys.readouterr().out
    outputs["search CLI JSON"] = json.dumps(result_as_dict(result), default=str)
    upload = tmp_path / "upload.dcm"
    upload.write_bytes((archive / "case03.dcm").read_bytes())
    outputs["UI upload details"] = lookup.query_details(lookup.load_upload(upload))
    with tracked_sqlite_connections() as connections:  # a database error at insert time
        failing = open_store(f"sqlite:///{tmp_path / 'failing.sqlite'}")
        deny_inserts_into(connections, "images")
        with pytest.raises(IngestError) as stop:
            ingest_paths([archive], failing, StandInEncoder(dim=32), IngestConfig(workers=0))
        failing.close()
    outputs["database error message"] = str(stop.value)
    outputs["application log records"] = "\n".join(r.getMessage() for r in caplog.records)
    assert ingest.returncode == 0 and "Edema" in outputs["search CLI table"]
    for name, text in outputs.items():
        found = leaks(text)
        cases.check(f"no patient data: {name}", not found, f"{found} in {text[:200]!r}")
    cases.figure("outputs checked", len(outputs))
    assert not {name: leaks(text) for name, text in outputs.items() if leaks(text)}
