"""Client-side jobs the PACS tests run INSIDE Orthanc's network namespace (via nsenter).

    python scale_pacs_job.py probe URL                 exit 0 once Orthanc answers
    python scale_pacs_job.py upload URL FILE...         POST each file to /instances
    python scale_pacs_job.py tls-proxy PORT UPSTREAM CERT KEY   HTTPS in front of Orthanc
    python scale_pacs_job.py ingest SETTINGS.json...    run ingest_dicomweb once per settings file
                                                        (in turn, one process), write result JSONs

Credentials come from the environment as in production (CHEXRETRIEVE_DICOMWEB_USER/PASSWORD);
``env`` in the settings overrides variables for that run. ``delay_s`` slows every WADO retrieval
down (a response hook on the session), so a test can stop the server in the middle of a study.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path


def tls_proxy(port: str, upstream: str, certificate: str, key: str) -> int:
    """HTTPS on 127.0.0.1:PORT forwarding GET requests to UPSTREAM (how a PACS sits behind a
    TLS-terminating proxy; Debian's Orthanc 1.10 crashes serving TLS itself)."""
    import http.server
    import ssl
    import urllib.error
    import urllib.request

    class Forward(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802, ANN202
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            request = urllib.request.Request(upstream + self.path, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, body, reply = answer.status, answer.read(), answer.headers
            except urllib.error.HTTPError as error:
                status, body, reply = error.code, error.read(), error.headers
            self.send_response(status)
            for name, value in reply.items():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # noqa: ANN002, ANN202
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Forward)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
    return 0


def _auth():
    return (os.environ["CHEXRETRIEVE_DICOMWEB_USER"], os.environ["CHEXRETRIEVE_DICOMWEB_PASSWORD"])


def probe(url: str, ca_bundle: str | None = None) -> int:
    import requests

    deadline = time.monotonic() + 90  # a hang guard: Orthanc answers within ~1 s of starting
    while time.monotonic() < deadline:
        try:
            answer = requests.get(
                f"{url}/system", auth=_auth(), timeout=1, verify=ca_bundle or True
            )
            if answer.ok:
                return 0
        except requests.RequestException:
            pass
        time.sleep(0.05)
    return 1


def upload(url: str, files: list[str]) -> int:
    import requests

    verify = os.environ.get("SCALE_CA_BUNDLE") or True
    for name in files:
        answer = requests.post(
            f"{url}/instances",
            data=Path(name).read_bytes(),
            auth=_auth(),
            timeout=30,
            verify=verify,
        )
        answer.raise_for_status()
    return 0


def ingest_all(settings_files: list[str]) -> int:
    code = 0
    for settings_file in settings_files:
        settings = json.loads(Path(settings_file).read_text())
        saved = dict(os.environ)
        os.environ.update(settings.get("env", {}))
        try:
            code = ingest(settings)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return code


def ingest(settings: dict) -> int:
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig
    from chexretrieve.pacs.client import PacsError, make_session
    from chexretrieve.pacs.config import DicomWebConfig
    from chexretrieve.pacs.ingest import ingest_dicomweb
    from chexretrieve.store import open_store

    config = DicomWebConfig(
        url=settings["url"],
        studies=tuple(settings.get("studies", ())),
        since=(
            __import__("datetime").date.fromisoformat(settings["since"])
            if settings.get("since")
            else None
        ),
        spool_dir=Path(settings["spool"]),
        verify_tls=not settings.get("insecure", False),
        ca_bundle=Path(settings["ca_bundle"]) if settings.get("ca_bundle") else None,
        timeout_s=5.0,
        max_retries=settings.get("max_retries", 2),
        backoff_s=0.1,
        max_backoff_s=0.4,
        flush_instances=settings.get("flush_instances", 4),
    )
    result: dict = {}
    store = open_store(settings["db"])
    try:
        session = make_session(config)
        delay = float(settings.get("delay_s", 0.0))
        hold_after, hold_until = settings.get("hold_after"), settings.get("hold_until")
        if delay or hold_after is not None:
            retrieval = re.compile(r"/instances/[0-9.]+$")
            retrieved = [0]

            def slow(response, *args, **kwargs):  # noqa: ANN001, ANN202
                if retrieval.search(response.url.split("?")[0]):
                    time.sleep(delay)
                    retrieved[0] += 1
                    if hold_after is not None and retrieved[0] > hold_after:
                        # stop here (the instances before this one are spooled) until the test
                        # has done what it does mid-study, whatever the machine's speed
                        guard = time.monotonic() + 300
                        while not Path(hold_until).exists() and time.monotonic() < guard:
                            time.sleep(0.02)
                return response

            session.hooks["response"].append(slow)
        report = ingest_dicomweb(
            config,
            store,
            StandInEncoder(dim=16),
            IngestConfig(workers=0, batch_size=4),
            session=session,
        )
        result = report.to_dict()
        result["exit"] = 0 if report.status == "completed" else 2
    except PacsError as exc:
        result = {"status": "error", "message": str(exc), "exit": 2}
    finally:
        store.close()
    Path(settings["result"]).write_text(json.dumps(result, default=str))
    return int(result["exit"])


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "probe":
        sys.exit(probe(*rest))
    if command == "tls-proxy":
        sys.exit(tls_proxy(*rest))
    if command == "upload":
        sys.exit(upload(rest[0], rest[1:]))
    sys.exit(ingest_all(rest))
