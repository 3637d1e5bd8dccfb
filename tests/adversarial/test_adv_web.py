"""The web surface of the case-lookup server (127.0.0.1 only), with the login on.

``/file=`` traversal, SSRF-style URLs, every route without the login, monitoring endpoints: refused
with no content. Uploads over the limit refused; 50 parallel uploads and queued actions answered
(done or busy), never a crash; uploads purged by age; one session cannot fetch another's upload.
The server is the real one (``launch_app``) over a small archive; the launch helper of the UI's
browser tests is imported, not copied.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import adv_crafting as craft
import pytest
import test_ui_browser as ui_browser

from chexretrieve.encoders.stand_in import load_stand_in
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

pytestmark = [
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
httpx = pytest.importorskip("httpx")

USER, PASSWORD = "clinician", "adv-s3cret-pass"
QUEUE = 8
HANG_GUARD_S = 120  # only a hang reaches this
#: answered without the login, by Gradio, with nothing of the app: the login page, static assets,
#: session keep-alive ("data: ALIVE"), the startup-event flag, a no-op reset, null user and token
PUBLIC = {
    "/",
    "/logout",
    "/gradio_api/runs",
    "/gradio_api/runs/",
    "/gradio_api/heartbeat/x",
    "/gradio_api/startup-events",
    "/favicon.ico",
    "/theme.css",
    "/gradio_api/theme.css",
    "/robots.txt",
    "/manifest.json",
    "/gradio_api/user",
    "/gradio_api/user/",
    "/gradio_api/token",
    "/gradio_api/token/",
    "/gradio_api/app_id",
    "/gradio_api/app_id/",
    "/gradio_api/reset",
    "/gradio_api/reset/",
}
SECRET = b"TOP-SECRET-OF-THE-INTRANET"
#: what app data looks like in an answer: the config, API description, findings, archive content
DATA_MARKERS = (
    b"Pleural",
    b"ADV000",
    b"Adversarial Test",
    b"load_upload",
    b"run_search",
    b"case-pick",
    b'"named_endpoints":{"',
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("adv-web")
    saved = dict(os.environ)
    for name in ("home", "gradio", "reports"):
        (root / name).mkdir()
    os.environ.update(
        HOME=str(root / "home"),
        GRADIO_TEMP_DIR=str(root / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False",
        CHEXRETRIEVE_TEST_ENCODERS="1",
        CHEXRETRIEVE_AUDIT_LOG=str(root / "audit.jsonl"),
    )
    archive = root / "archive"
    for i in range(16):
        craft.write_small_radiograph(archive / f"c{i:02d}.dcm", 60 + i, size=64)
    db_url = f"sqlite:///{root / 'archive.sqlite'}"
    store = open_store(db_url)
    ingest_paths([archive], store, load_stand_in("stand-in"), IngestConfig(workers=0))
    store.close()
    world = {"root": root, "db_url": db_url}
    app, base = ui_browser._launch(
        world, users=[(USER, "radiologist", PASSWORD)], max_upload_mb=1, queue_size=QUEUE
    )
    secret = _secret_server()
    try:
        yield {
            "root": root,
            "db_url": db_url,
            "app": app,
            "base": base,
            "archive": archive,
            "secret": secret,
        }
    finally:
        app.close(verbose=False)
        secret.shutdown()
        secret.server_close()
        os.environ.clear()
        os.environ.update(saved)


def _secret_server() -> ThreadingHTTPServer:
    class Secret(BaseHTTPRequestHandler):
        hits: list[str] = []

        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

        def do_GET(self) -> None:  # noqa: N802
            Secret.hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(SECRET)))
            self.end_headers()
            self.wfile.write(SECRET)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Secret)
    server.hits = Secret.hits  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _client(site, login: bool = True):  # noqa: ANN001, ANN202
    client = httpx.Client(base_url=site["base"], timeout=60)
    if login:
        answer = client.post("login", data={"username": USER, "password": PASSWORD})
        assert answer.status_code == 200, answer.text[:200]
    return client


def _routes(app) -> list[tuple[str, str]]:  # noqa: ANN001
    """(method, path) of every HTTP route of the running server, path parameters filled in."""
    found = []

    def walk(routes) -> None:  # noqa: ANN001
        for route in routes:
            if hasattr(route, "original_router"):
                walk(route.original_router.routes)
            elif getattr(route, "methods", None):
                path = re.sub(r"\{[^}]+\}", "x", route.path)
                found.extend((m, path) for m in sorted(route.methods) if m != "HEAD")

    walk(app.server_app.routes)
    return sorted(set(found))


def _first_bytes(client, method: str, path: str) -> tuple[int, bytes]:  # noqa: ANN001
    """Status and the first 64 kB of the answer (event streams never end on their own)."""
    with client.stream(method, path, json={} if method != "GET" else None, timeout=10) as answer:
        body = b""
        try:
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > 65536 or answer.headers.get("content-type", "").startswith(
                    "text/event-stream"
                ):
                    break
        except httpx.TimeoutException:
            pass
        return answer.status_code, body


def test_every_route_refuses_without_the_login(site, cases):
    anonymous = _client(site, login=False)
    routes = _routes(site["app"])
    leaks = []
    for method, path in routes:
        status, body = _first_bytes(anonymous, method, path)
        public = path in PUBLIC or path.startswith(
            ("/static/", "/assets/", "/svelte/", "/pwa_icon")
        )
        refused = status in (401, 403, 404, 405, 422) or public
        no_data = not any(marker in body for marker in DATA_MARKERS)
        ok = refused and no_data
        cases.check(f"anonymous {method} {path}", ok, f"{status} {body[:80]!r}")
        if not ok:
            leaks.append((method, path, status, body[:80]))
    cases.figure("routes probed", len(routes))
    assert len(routes) > 50 and not leaks, leaks
    openapi = anonymous.get("/openapi.json")
    cases.check("FastAPI schema not served", openapi.status_code == 404, str(openapi.status_code))
    assert openapi.status_code == 404


@pytest.mark.parametrize("login", [False, True], ids=["anonymous", "signed-in"])
def test_file_traversal_ssrf_and_monitoring_are_refused_with_no_content(site, cases, login):
    client = _client(site, login=login)
    root, secret = site["root"], site["secret"]
    secret_url = f"http://127.0.0.1:{secret.server_address[1]}/secret.dcm"
    archived = next(site["archive"].glob("*.dcm"))
    targets = [
        "gradio_api/file=../../../../../../etc/passwd",
        "gradio_api/file=%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "gradio_api/file=..%2f..%2f..%2f..%2fetc%2fpasswd",
        "gradio_api/file=/etc/passwd",
        "gradio_api/file=/proc/self/environ",
        f"gradio_api/file={archived}",
        f"gradio_api/file={root / 'archive.sqlite'}",
        f"gradio_api/file={root / 'audit.jsonl'}",
        f"gradio_api/file={root / 'gradio'}/../archive.sqlite",
        f"gradio_api/file/{root / 'archive.sqlite'}",
        f"gradio_api/file={secret_url}",
        f"gradio_api/proxy={secret_url}",
        f"file={secret_url}",
        f"proxy={secret_url}",
        "monitoring",
        "monitoring/summary",
        "monitoring/x",
        "gradio_api/monitoring",
        "gradio_api/profiling/summary",
        "gradio_api/profiling/traces",
        "gradio_api/dev/reload",
        "docs",
        "redoc",
        "openapi.json",
    ]
    forbidden = [b"root:", b"SQLite format", b"DICM", SECRET, b'"seq"', b"PATH="]
    failures = []
    for target in targets:
        status, body = _first_bytes(client, "GET", "/" + target)
        ok = status in (400, 401, 403, 404, 405) and not any(f in body for f in forbidden)
        cases.check(
            f"{'signed-in' if login else 'anonymous'} {target[:60]}", ok, f"{status} {body[:80]!r}"
        )
        if not ok:
            failures.append((target, status, body[:60]))
    cases.check("the intranet server was never contacted", secret.hits == [], str(secret.hits))
    assert not failures and secret.hits == []


def test_uploads_stay_private_are_capped_and_purged(site, cases):
    alice, bob = _client(site), _client(site)
    data = (site["archive"] / "c01.dcm").read_bytes()
    answer = alice.post(
        "gradio_api/upload", files={"files": ("alice.dcm", data, "application/dicom")}
    )
    path = answer.json()[0]
    fetched = {
        name: c.get(f"gradio_api/file={path}")
        for name, c in (("bob", bob), ("alice", alice), ("anonymous", _client(site, login=False)))
    }
    private = all(
        a.status_code in (401, 403, 404)
        and a.content[:4] != b"DICM"
        and data[:200] not in a.content
        for a in fetched.values()
    )
    cases.check(
        "an upload is never served back (to another session or its own)",
        private,
        str({k: v.status_code for k, v in fetched.items()}),
    )
    big = alice.post(
        "gradio_api/upload", files={"files": ("big.dcm", bytes(2_000_000), "application/dicom")}
    )

    def chunks():  # no Content-Length: the cap must hold while streaming
        for _ in range(40):
            yield bytes(64_000)

    boundary = "advboundary"
    streamed = alice.post(
        "gradio_api/upload",
        content=_multipart_stream(boundary, "streamed.dcm", chunks()),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    capped = big.status_code == 413 and streamed.status_code in (400, 413)
    cases.check(
        "uploads over 1 MiB refused (sized and streamed)",
        capped,
        f"{big.status_code} {streamed.status_code}",
    )
    left = [
        p
        for p in (site["root"] / "gradio").rglob("*")
        if p.is_file() and p.stat().st_size > 1_500_000
    ]
    cases.check("nothing over the cap left on disk", left == [], str(left))
    assert private and capped and left == []


def test_uploads_left_on_the_server_are_purged_by_age(site, cases):
    """An upload never used by an action stays only until ``UIConfig.upload_max_age_s``."""
    world = {"root": site["root"], "db_url": site["db_url"]}
    app, base = ui_browser._launch(
        world, users=[(USER, "radiologist", PASSWORD)], upload_max_age_s=2
    )
    try:
        client = _client({"base": base})
        data = (site["archive"] / "c03.dcm").read_bytes()
        answer = client.post(
            "gradio_api/upload", files={"files": ("left.dcm", data, "application/dicom")}
        )
        path = answer.json()[0]
        stored_at_first = os.path.exists(path)
        deadline = time.monotonic() + 120  # a hang guard: the purge takes ~2 s
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.25)
        purged = stored_at_first and not os.path.exists(path)
        cases.check(
            "an unused upload is deleted from disk after upload_max_age_s (2 s here)",
            purged,
            f"stored at first: {stored_at_first}, still there after 120 s: {os.path.exists(path)}",
        )
        assert purged
    finally:
        app.close(verbose=False)


def _multipart_stream(boundary: str, name: str, body):  # noqa: ANN001, ANN202
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        "Content-Type: application/dicom\r\n\r\n"
    ).encode()
    yield from body
    yield f"\r\n--{boundary}--\r\n".encode()


def test_50_parallel_uploads_and_actions_get_answers_or_busy_never_a_crash(site, cases):
    client = _client(site)
    data = (site["archive"] / "c02.dcm").read_bytes()
    config = client.get("config").json()
    upload_ids = {c["id"] for c in config["components"] if c["props"].get("elem_id") == "upload"}
    fn_index = next(  # the upload event (handlers have no API name: found by their trigger)
        d["id"] for d in config["dependencies"]
        if any(t[0] in upload_ids and t[1] == "upload" for t in d["targets"])
    )  # fmt: skip

    # every upload first, then the 50 actions released together (a barrier), so the queue of
    # QUEUE overflows on a machine of any speed instead of only when the uploads happen to overlap
    start = threading.Barrier(50)

    def one(index: int):  # noqa: ANN202
        session = uuid.uuid4().hex[:10]
        try:
            up = client.post(
                "gradio_api/upload", files={"files": (f"p{index}.dcm", data, "application/dicom")}
            )
        except Exception as exc:  # noqa: BLE001 - a reset connection is a crash
            start.wait(HANG_GUARD_S)
            return "error", type(exc).__name__
        start.wait(HANG_GUARD_S)
        if up.status_code != 200:
            return "upload", up.status_code
        try:
            file_data = {
                "path": up.json()[0],
                "orig_name": f"p{index}.dcm",
                "meta": {"_type": "gradio.FileData"},
            }
            joined = client.post(
                "gradio_api/queue/join",
                json={
                    "data": [file_data, "Pleural Effusion"],  # upload, finding
                    "fn_index": fn_index,
                    "session_hash": session,
                    "event_data": None,
                    "trigger_id": None,
                },
            )
            return "join", joined.status_code
        except Exception as exc:  # noqa: BLE001 - a reset connection is a crash
            return "error", type(exc).__name__

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(one, range(50)))
    counts = collections.Counter(answers)
    time.sleep(1.0)
    alive = client.get("config").status_code == 200
    crashed = [a for a in answers if a[0] == "error" or a[1] >= 500 and a[1] != 503]
    busy = counts[("join", 503)]
    queued = counts[("join", 200)]
    cases.check("no crash, no reset, no 5xx but 'busy'", not crashed, str(counts))
    cases.check(f"beyond the queue of {QUEUE}: busy answers (503)", busy > 0, str(counts))
    cases.check("the rest were queued", queued >= QUEUE and queued + busy == 50, str(counts))
    cases.check("the server answers afterwards", alive)
    cases.figure("50 parallel: queued / busy", f"{queued} / {busy}")
    assert not crashed and busy > 0 and queued + busy == 50 and alive
