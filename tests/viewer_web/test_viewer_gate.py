"""The viewer's gate, DICOMweb endpoint and OHIF files over HTTP, attacked as an outsider would.

A real :class:`ViewerGate` with a real :class:`DicomWebEndpoint` over DICOM files written here, a
real audit log and a real :class:`OhifSite` over a small stand-in ``dist/`` (the layout of OHIF's:
an ``index.html`` naming its app bundle, bundles built for ``/``). The signed-in user is given by
a header the test sets (standing in for the Gradio login); every route is called without being
signed in, without a viewer session, with another user's session and with a link for studies its
search did not show.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from starlette.testclient import TestClient

from chexretrieve.audit import AuditLog
from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.viewer_web.access import SESSION_COOKIE, ViewerAccess, may_see_phi
from chexretrieve.viewer_web.dicomweb import DicomWebEndpoint
from chexretrieve.viewer_web.gate import ViewerGate
from chexretrieve.viewer_web.ohif import OhifSite


def _study(folder, n: int) -> tuple[str, str, str, np.ndarray]:
    values = (np.arange(48 * 40, dtype=np.uint16).reshape(48, 40) * (n + 1)) % 4096
    uids = [derive_uid("gate", n, kind) for kind in ("study", "series", "image")]
    write_radiograph(
        folder / f"{n}.dcm", values,
        {"StudyInstanceUID": uids[0], "SeriesInstanceUID": uids[1], "SOPInstanceUID": uids[2],
         "Modality": "CR", "PatientID": f"PID-{n}", "PatientName": f"Secret^Name{n}"},
    )  # fmt: skip
    return (*uids, values)


def _dist(folder):
    dist = folder / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text(
        '<script defer src="/app.bundle.abc123.js"></script><link href="/app.bundle.css">'
    )
    (dist / "app.bundle.abc123.js").write_text('__webpack_require__.p = "/";\nconsole.log(1);')
    (dist / "app.bundle.css").write_text("@font-face{src:url(/f.woff2)}")
    (dist / "f.woff2").write_bytes(b"wOF2")
    (dist / "sw.js").write_text("importScripts('https://cdn.example/x.js')")
    (dist / "app.bundle.abc123.js.map").write_text("{}")
    (dist / "assets" / "favicon.ico").write_bytes(b"ico")
    (folder / "outside.txt").write_text("not for the browser")
    return dist


class Behind:
    """The app behind the gate: answers 200 'gradio' to everything else."""

    async def __call__(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"gradio"})


@pytest.fixture
def world(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    a, b = _study(archive, 1), _study(archive, 2)
    studies = {a[0]: [(11, str(archive / "1.dcm"))], b[0]: [(12, str(archive / "2.dcm"))]}
    access = ViewerAccess()
    audit = AuditLog(tmp_path / "audit.jsonl")
    roles = {"dr.alice": "radiologist", "student.bob": "student"}
    gate = ViewerGate(
        Behind(),
        user_of=lambda request: request.headers.get("x-test-user"),
        phi_of=lambda user: may_see_phi(user, roles.get(user), accounts=True),
        site=OhifSite(_dist(tmp_path)),
        endpoint=DicomWebEndpoint(lambda: studies, access, audit),
        access=access,
    )
    client = TestClient(gate, base_url="http://127.0.0.1")
    return {"client": client, "access": access, "audit": audit, "a": a, "b": b}


def _as(client, user: str | None, cookie: str | None = None):
    headers = {"x-test-user": user} if user else {}
    if cookie:
        headers["cookie"] = f"{SESSION_COOKIE}={cookie}"
    return headers


def _routes(study, series, sop):
    return [
        "/dicomweb/studies",
        f"/dicomweb/studies?StudyInstanceUID={study}",
        f"/dicomweb/studies/{study}/series",
        f"/dicomweb/studies/{study}/series/{series}/instances",
        f"/dicomweb/studies/{study}/metadata",
        f"/dicomweb/studies/{study}/series/{series}/metadata",
        f"/dicomweb/studies/{study}/series/{series}/instances/{sop}/metadata",
        f"/dicomweb/studies/{study}/series/{series}/instances/{sop}/frames/1",
        f"/dicomweb/studies/{study}/series/{series}/instances/{sop}/thumbnail?viewport=64,64",
        f"/dicomweb/studies/{study}/thumbnail",
    ]


def _open(client, user, grant, studies, cookie=None):
    return client.get(
        "/viewer/open",
        params={"grant": grant, "studies": ",".join(studies)},
        headers=_as(client, user, cookie),
        follow_redirects=False,
    )


def test_nobody_signed_in_gets_401_on_every_route(world):
    client, (study, series, sop, _) = world["client"], world["a"]
    for path in [*_routes(study, series, sop), "/viewer/", "/viewer/viewer", "/viewer/open",
                 "/viewer/app-config.js", "/viewer/app.bundle.abc123.js"]:  # fmt: skip
        assert client.get(path).status_code == 401, path
    assert client.get("/config").text == "gradio"  # the rest is the app's own business


def test_without_a_viewer_session_no_study_exists(world):
    client, (study, series, sop, _) = world["client"], world["a"]
    world["access"].grant("dr.alice", [study])  # a grant not followed opens nothing
    for cookie in (None, "made-up-session"):
        for path in _routes(study, series, sop):
            answer = client.get(path, headers=_as(client, "dr.alice", cookie))
            if path.startswith("/dicomweb/studies") and path.count("/") == 2:
                assert answer.status_code == 200 and answer.json() == [], path
            else:
                assert answer.status_code == 404, path
    assert world["audit"].entries() == []


def test_a_link_opens_its_studies_for_its_user_only(world):
    client, access = world["client"], world["access"]
    (a_study, a_series, a_sop, a_values), (b_study, b_series, b_sop, _) = world["a"], world["b"]
    grant = access.grant("student.bob", [a_study])
    assert _open(client, "dr.alice", grant, [a_study]).status_code == 403  # not hers
    assert _open(client, "student.bob", grant, [b_study]).status_code == 403  # not shown
    assert _open(client, "student.bob", "forged", [a_study]).status_code == 403
    opened = _open(client, "student.bob", grant, [a_study])
    assert opened.status_code == 303
    assert opened.headers["location"] == f"/viewer/viewer?StudyInstanceUIDs={a_study}"
    cookie = opened.cookies[SESSION_COOKIE]
    assert "httponly" in opened.headers["set-cookie"].lower()
    assert "samesite=strict" in opened.headers["set-cookie"].lower()
    for path in _routes(a_study, a_series, a_sop):
        answer = client.get(path, headers=_as(client, "student.bob", cookie))
        assert answer.status_code == 200, path
        # another signed-in user with Bob's session cookie gets nothing
        stolen = client.get(path, headers=_as(client, "dr.alice", cookie))
        assert stolen.status_code == 404 or stolen.json() == [], path
    for path in _routes(b_study, b_series, b_sop)[2:]:  # the study its search did not show
        assert client.get(path, headers=_as(client, "student.bob", cookie)).status_code == 404
    frame = client.get(_routes(a_study, a_series, a_sop)[7],
                       headers=_as(client, "student.bob", cookie))  # fmt: skip
    assert frame.headers["content-type"].startswith("multipart/related")
    boundary = frame.headers["content-type"].split("boundary=")[1]
    head, _, rest = frame.content.partition(b"\r\n\r\n")
    assert head.startswith(f"--{boundary}".encode())
    assert b"transfer-syntax=1.2.840.10008.1.2.1" in head
    pixels = rest[: -len(f"\r\n--{boundary}--\r\n")]
    np.testing.assert_array_equal(np.frombuffer(pixels, "<u2").reshape(48, 40), a_values)
    # a student's headers are de-identified; every metadata and frame read is audited
    metadata = client.get(_routes(a_study, a_series, a_sop)[4],
                          headers=_as(client, "student.bob", cookie)).json()  # fmt: skip
    assert "Secret" not in json.dumps(metadata) and "PID-1" not in json.dumps(metadata)
    thumb = client.get(_routes(a_study, a_series, a_sop)[8],
                       headers=_as(client, "student.bob", cookie))  # fmt: skip
    assert thumb.headers["content-type"] == "image/jpeg" and thumb.content[:2] == b"\xff\xd8"
    views = [(e["user"], e["what"], e["image"]) for e in world["audit"].entries()]
    assert ("student.bob", "dicomweb frame", 11) in views
    assert ("student.bob", "dicomweb metadata", 11) in views
    assert {user for user, *_ in views} == {"student.bob"}
    for method in ("post", "put", "delete"):
        call = getattr(client, method)
        path = _routes(a_study, a_series, a_sop)[4]
        assert call(path, headers=_as(client, "student.bob", cookie)).status_code == 405


def test_a_radiologist_sees_phi_and_two_studies_open_side_by_side(world):
    client, access = world["client"], world["access"]
    (a_study, a_series, a_sop, _), (b_study, *_) = world["a"], world["b"]
    grant = access.grant("dr.alice", [a_study, b_study])
    opened = _open(client, "dr.alice", grant, [a_study, b_study])
    location = opened.headers["location"]
    assert location == (f"/viewer/viewer?StudyInstanceUIDs={a_study},{b_study}"
                        "&hangingprotocolId=@ohif/hpCompare&stageid=2x1")  # fmt: skip
    cookie = opened.cookies[SESSION_COOKIE]
    metadata = client.get(_routes(a_study, a_series, a_sop)[4],
                          headers=_as(client, "dr.alice", cookie)).json()  # fmt: skip
    assert metadata[0]["00100010"]["Value"] == [{"Alphabetic": "Secret^Name1"}]
    listed = client.get("/dicomweb/studies", headers=_as(client, "dr.alice", cookie)).json()
    assert sorted(row["0020000D"]["Value"][0] for row in listed) == sorted([a_study, b_study])
    # the priors of one patient: only that patient's allowed studies
    priors = client.get("/dicomweb/studies", params={"PatientID": "PID-2"},
                        headers=_as(client, "dr.alice", cookie)).json()  # fmt: skip
    assert [row["0020000D"]["Value"][0] for row in priors] == [b_study]


def test_ohif_files_are_ours_rebased_and_nothing_else_is_served(world):
    client = world["client"]
    me = _as(client, "dr.alice")
    page = client.get("/viewer/viewer?StudyInstanceUIDs=1.2.3", headers=me)
    assert page.status_code == 200 and "window.PUBLIC_URL='/viewer/'" in page.text
    assert "/viewer/app.bundle.abc123.js" in page.text and "sw.js" not in page.text
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self' blob: data:;" in csp
    config = client.get("/viewer/app-config.js", headers=me).text
    assert "window.location.origin + '/dicomweb'" in config and "https://" not in config
    bundle = client.get("/viewer/app.bundle.abc123.js", headers=me)
    assert '__webpack_require__.p = "/viewer/";' in bundle.text
    assert "url(/viewer/f.woff2)" in client.get("/viewer/app.bundle.css", headers=me).text
    assert client.get("/viewer/f.woff2", headers=me).content == b"wOF2"
    for refused in ("/viewer/sw.js", "/viewer/app.bundle.abc123.js.map", "/viewer/index.html.x",
                    "/viewer/../outside.txt", "/viewer/%2e%2e/outside.txt",
                    "/viewer/assets/../../outside.txt"):  # fmt: skip
        answer = client.get(refused, headers=me)
        assert answer.status_code == 404 or "not for the browser" not in answer.text, refused
        assert "not for the browser" not in answer.text


def test_may_see_phi_rule():
    assert may_see_phi("anyone") is True  # the local single user, no accounts
    assert may_see_phi("dr.alice", "radiologist", accounts=True) is True
    assert may_see_phi("root", "Admin", accounts=True) is True
    for role in ("curator", "researcher", "student", None, ""):
        assert may_see_phi("someone", role, accounts=True) is False


@pytest.mark.parametrize("kept", ["memory", "store"])
def test_grants_and_sessions_expire(tmp_path, kept):
    from chexretrieve.store import open_store
    from chexretrieve.store.access_state import AccessState

    now = [1000.0]
    state = None
    if kept == "store":
        state = AccessState(open_store(f"sqlite:///{tmp_path / 'grants.sqlite'}"))
    access = ViewerAccess(ttl_s=60, state=state, clock=lambda: now[0])
    grant = access.grant("u", ["1.2"])
    session = access.open(grant, "u", ["1.2"])
    assert access.allowed(session, "u", "1.2") and not access.allowed(session, "u", "1.3")
    now[0] += 61
    assert not access.allowed(session, "u", "1.2")
    with pytest.raises(PermissionError, match="expired"):
        access.open(grant, "u", ["1.2"])


def test_with_a_pacs_ohif_reads_it_and_the_own_endpoint_is_off(tmp_path):
    """`serve --dicomweb URL`: OHIF's one data source is that PACS, the page may connect to
    that origin only besides this server, and /dicomweb answers nothing."""
    pacs = "http://pacs.example.org:8042/dicom-web/"
    site = OhifSite(_dist(tmp_path), pacs)
    gate = ViewerGate(Behind(), user_of=lambda r: "dr.alice", phi_of=lambda u: True, site=site,
                      endpoint=None, access=ViewerAccess())  # fmt: skip
    client = TestClient(gate, base_url="http://127.0.0.1")
    config = client.get("/viewer/app-config.js").text
    assert 'const ROOT = "http://pacs.example.org:8042/dicom-web";' in config
    assert "window.location.origin" not in config
    csp = client.get("/viewer/").headers["content-security-policy"]
    assert "connect-src 'self' blob: data: http://pacs.example.org:8042;" in csp
    assert client.get("/dicomweb/studies").status_code == 404
    with pytest.raises(ValueError, match="http"):
        OhifSite(_dist(tmp_path / "other"), "file:///etc/passwd")


def test_serve_refuses_a_dicomweb_url_that_is_not_http():
    from chexretrieve.ui.config import UIConfig

    with pytest.raises(ValueError, match="http"):
        UIConfig(dicomweb_url="pacs.example.org/dicom-web")
    assert UIConfig(dicomweb_url="https://pacs/dicom-web").dicomweb_url == "https://pacs/dicom-web"


def test_nothing_is_sent_when_the_audit_trail_cannot_be_written(world, tmp_path):
    client, access = world["client"], world["access"]
    study, series, sop, _ = world["a"]
    grant = access.grant("dr.alice", [study])
    cookie = _open(client, "dr.alice", grant, [study]).cookies[SESSION_COOKIE]
    audit_path = world["audit"].path
    audit_path.unlink(missing_ok=True)
    audit_path.mkdir()  # a folder where the log file should be: every append fails
    for path in _routes(study, series, sop)[4:]:
        answer = client.get(path, headers=_as(client, "dr.alice", cookie))
        assert answer.status_code == 503 and "audit trail" in answer.text, path


def test_a_link_made_by_one_server_process_opens_in_another(tmp_path):
    """Grants and viewer sessions in the store: a search's link made through one engine (one
    server process) opens through another, extends the same viewer session, and names no token
    in the store (only its SHA-256)."""
    from chexretrieve.store import open_store
    from chexretrieve.store.access_state import open_access_state

    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    open_store(url).close()
    first, second = open_access_state(url), open_access_state(url)
    made_here = ViewerAccess(state=first)
    opened_there = ViewerAccess(state=second)
    grant = made_here.grant("dr.a", ["1.2", "1.3"])
    session = opened_there.open(grant, "dr.a", ["1.2"])
    assert made_here.allowed(session, "dr.a", "1.2") and not made_here.allowed(
        session, "dr.a", "1.3"
    )
    assert opened_there.open(grant, "dr.a", ["1.3"], session) == session
    assert made_here.studies_of(session, "dr.a") == {"1.2", "1.3"}
    assert not made_here.allowed(session, "dr.b", "1.2")
    with pytest.raises(PermissionError, match="another user"):
        opened_there.open(grant, "dr.b", ["1.2"])
    dump = "\n".join(first.store.engine.raw_connection().iterdump())
    assert grant not in dump and session not in dump
    first.close(), second.close()
