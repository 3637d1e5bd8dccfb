"""Client-side jobs the PACS tests run INSIDE Orthanc's network namespace (via nsenter).

    python scale_pacs_job.py probe URL                 exit 0 once Orthanc answers
    python scale_pacs_job.py upload URL FILE...         POST each file to /instances
    python scale_pacs_job.py ingest SETTINGS.json       run ingest_dicomweb, write a result JSON

Credentials come from the environment as in production (CHEXRETRIEVE_DICOMWEB_USER/PASSWORD).
``delay_s`` in the settings slows every WADO retrieval down (a response hook on the session), so
a test can stop the server in the middle of a study.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path


def _auth():
    return (os.environ["CHEXRETRIEVE_DICOMWEB_USER"], os.environ["CHEXRETRIEVE_DICOMWEB_PASSWORD"])


def probe(url: str) -> int:
    import requests

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/system", auth=_auth(), timeout=1).ok:
                return 0
        except requests.RequestException:
            pass
        time.sleep(0.05)
    return 1


def upload(url: str, files: list[str]) -> int:
    import requests

    for name in files:
        answer = requests.post(
            f"{url}/instances", data=Path(name).read_bytes(), auth=_auth(), timeout=30
        )
        answer.raise_for_status()
    return 0


def ingest(settings_file: str) -> int:
    settings = json.loads(Path(settings_file).read_text())
    from chexretrieve.ingest import IngestConfig
    from chexretrieve.ingest.stand_in import StandInEncoder
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
        if delay:
            retrieval = re.compile(r"/instances/[0-9.]+$")

            def slow(response, *args, **kwargs):  # noqa: ANN001, ANN202
                if retrieval.search(response.url.split("?")[0]):
                    time.sleep(delay)
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
        sys.exit(probe(rest[0]))
    if command == "upload":
        sys.exit(upload(rest[0], rest[1:]))
    sys.exit(ingest(rest[0]))
