"""The DICOMweb client's rules without a server: retries and back-off, what is never retried,
credentials and TLS settings, bad settings named clearly, the PACS ledger's completeness rule."""

from __future__ import annotations

import datetime as dt

import pytest
import requests

from chexretrieve.pacs.client import (
    DicomWebSource,
    InstanceMissing,
    PacsError,
    PacsUnavailable,
    is_uid,
    make_session,
)
from chexretrieve.pacs.commands import parse_since
from chexretrieve.pacs.config import DicomWebConfig
from chexretrieve.store import open_store
from chexretrieve.store.pacs import InstanceOutcome, PacsLedger

URL = "https://pacs.example.org/dicom-web"


def http_error(status: int) -> requests.exceptions.HTTPError:
    response = requests.models.Response()
    response.status_code = status
    return requests.exceptions.HTTPError(f"HTTP {status}", response=response)


class Scripted:
    """A call that raises the scripted errors in turn, then returns 'done'."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def source(**settings) -> tuple[DicomWebSource, list[float]]:
    pauses: list[float] = []
    config = DicomWebConfig(url=URL, **settings)
    return DicomWebSource(config, session=requests.Session(), sleep=pauses.append), pauses


def test_transient_failures_are_retried_with_doubling_bounded_pauses():
    src, pauses = source(max_retries=5, backoff_s=0.5, max_backoff_s=2.0)
    call = Scripted(
        http_error(503),
        requests.exceptions.ConnectionError("refused"),
        requests.exceptions.ReadTimeout("slow"),
        http_error(429),
        http_error(502),
    )
    assert src._call("search", call) == "done"
    assert call.calls == 6 and pauses == [0.5, 1.0, 2.0, 2.0, 2.0] and src.retries == 5


def test_the_retry_budget_is_bounded():
    src, pauses = source(max_retries=2, backoff_s=0.1, max_backoff_s=1.0)
    call = Scripted(*[http_error(500)] * 5)
    with pytest.raises(PacsUnavailable, match="HTTP 500 after 3 attempts.*run the same command"):
        src._call("retrieve instance 1.2.3", call)
    assert call.calls == 3 and pauses == [0.1, 0.2]


@pytest.mark.parametrize(
    ("error", "raised", "message"),
    [
        (http_error(401), PacsError, r"refused access \(HTTP 401\).*CHEXRETRIEVE_DICOMWEB_USER"),
        (http_error(403), PacsError, r"HTTP 403"),
        (requests.exceptions.SSLError("bad cert"), PacsError, r"TLS verification.*--ca-bundle"),
        (http_error(400), PacsError, r"answered HTTP 400"),
    ],
)
def test_failures_that_waiting_cannot_fix_are_not_retried(error, raised, message):
    src, pauses = source(max_retries=4)
    call = Scripted(error)
    with pytest.raises(raised, match=message):
        src._call("search", call)
    assert call.calls == 1 and pauses == []


def test_a_missing_instance_is_reported_not_retried():
    src, _ = source()
    call = Scripted(http_error(404))
    with pytest.raises(InstanceMissing):
        src._call("retrieve", call, missing_is_error=False)
    assert call.calls == 1


def test_credentials_come_from_the_environment(monkeypatch, tmp_path):
    config = DicomWebConfig(url=URL)
    for name in (config.user_env, config.password_env, config.token_env):
        monkeypatch.delenv(name, raising=False)
    plain = make_session(config)
    assert plain.auth is None and "Authorization" not in plain.headers and plain.verify is True
    monkeypatch.setenv(config.user_env, "reader")
    with pytest.raises(PacsError, match="needs both"):
        make_session(config)
    monkeypatch.setenv(config.password_env, "s3cret")
    assert make_session(config).auth == ("reader", "s3cret")
    monkeypatch.setenv(config.token_env, "tok")
    bearer = make_session(config)
    assert bearer.headers["Authorization"] == "Bearer tok" and bearer.auth is None
    assert make_session(DicomWebConfig(url=URL, verify_tls=False)).verify is False
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    pinned = make_session(DicomWebConfig(url=URL, ca_bundle=bundle))
    # --ca-bundle / --insecure win over $REQUESTS_CA_BUNDLE (plain requests lets it override)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    assert pinned.merge_environment_settings(URL, {}, False, None, None)["verify"] == str(bundle)
    unverified = make_session(DicomWebConfig(url=URL, verify_tls=False))
    assert unverified.merge_environment_settings(URL, {}, False, None, None)["verify"] is False
    with pytest.raises(PacsError, match="does not exist"):
        make_session(DicomWebConfig(url=URL, ca_bundle=tmp_path / "absent.pem"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"url": "ftp://pacs/dicom-web"}, "not an http"),
        ({"url": "https://user:pw@pacs/dicom-web"}, "contains credentials"),
        ({"url": URL, "timeout_s": 0}, "timeout must be positive"),
        ({"url": URL, "max_retries": -1}, "max_retries must be >= 0"),
    ],
)
def test_bad_settings_name_the_problem(settings, message):
    with pytest.raises(ValueError, match=message):
        DicomWebConfig(**settings)


def test_source_label_never_carries_a_query_or_secret():
    config = DicomWebConfig(url="https://pacs.example.org:8443/dicom-web/?token=abc")
    assert config.source_label == "https://pacs.example.org:8443/dicom-web"


def test_dates_and_uids():
    assert parse_since("2024-01-31") == parse_since("20240131") == dt.date(2024, 1, 31)
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_since("31/01/2024")
    assert is_uid("1.2.840.10008.1") and not is_uid("../../etc/passwd")
    assert not is_uid("1." + "2" * 70) and not is_uid("1..2")


def test_a_study_is_complete_only_when_every_listed_instance_settled(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    book = PacsLedger(store, URL)
    expected = ["1.1", "1.2", "1.3"]
    book.record_instances(
        [
            InstanceOutcome("9", "8", "1.1", "stored"),
            InstanceOutcome("9", "8", "1.2", "transfer-failed", "not-found"),
        ]
    )
    assert book.settle_study("9", expected, None) == "partial"  # 1.2 failed, 1.3 never tried
    book.record_instances([InstanceOutcome("9", "8", "1.2", "stored")])
    assert book.settle_study("9", expected, None) == "partial"
    book.record_instances([InstanceOutcome("9", "8", "1.3", "rejected", "modality")])
    assert book.settle_study("9", expected, None) == "complete"
    state = book.study_state("9")
    assert (state.expected_instances, state.stored_instances, state.rejected_instances) == (3, 2, 1)
    frame = book.instances_frame("9").set_index("sop_uid")
    assert frame.loc["1.2", "attempts"] == 2 and frame.loc["1.2", "status"] == "stored"
    assert PacsLedger(store, "https://other/dicom-web").study_state("9") is None
    with pytest.raises(ValueError, match="not one of"):
        book.record_instances([InstanceOutcome("9", "8", "1.4", "lost")])
    store.close()


def test_the_command_line_wants_paths_or_a_dicomweb_url(tmp_path):
    from typer.testing import CliRunner

    from chexretrieve.cli import app

    runner = CliRunner()
    nothing = runner.invoke(app, ["ingest", "--db", f"sqlite:///{tmp_path / 's.sqlite'}"])
    assert nothing.exit_code == 2 and "give folders or files, or --dicomweb" in nothing.output
    both = runner.invoke(app, ["ingest", str(tmp_path), "--dicomweb", URL])
    assert both.exit_code == 2 and "not both" in both.output
    bad = runner.invoke(app, ["ingest", "--dicomweb", URL, "--since", "yesterday"])
    assert bad.exit_code == 2 and "YYYY-MM-DD" in bad.output
