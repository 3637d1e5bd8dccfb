"""A served case-lookup app with accounts for the access and input suites (test_adv_access,
test_adv_inputs): a small phantom archive with labels and accession numbers, a copy of the anchor
sets, one account per role; and an outsider's HTTP helpers (sign in, call through the page's own
event queue and read its answer). The launch helper of the UI's browser tests is imported."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import httpx
import test_ui_browser as ui_browser

REPO = Path(__file__).resolve().parents[2]
PASSWORD = {"rad": "rad-password-long", "cur": "cur-password-long", "adm": "adm-password-long"}
ROLE = {"rad": "radiologist", "cur": "curator", "adm": "admin"}
N_CASES = 24


def make_world(root: Path) -> dict:
    """Environment (restore with ``restore(world)``), archive, anchors copy, accounts."""
    from chexretrieve.encoders.stand_in import load_stand_in
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
    from chexretrieve.store import open_store

    saved = dict(os.environ)
    for name in ("home", "gradio", "reports"):
        (root / name).mkdir()
    anchors = root / "anchors"
    shutil.copytree(REPO / "anchors", anchors)
    os.environ.update(
        HOME=str(root / "home"),
        GRADIO_TEMP_DIR=str(root / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False",
        CHEXRETRIEVE_TEST_ENCODERS="1",
        CHEXRETRIEVE_ANCHORS=str(anchors),
        CHEXRETRIEVE_AUDIT_LOG=str(root / "audit.jsonl"),
    )
    archive = root / "phantom"
    write_archive(archive, ArchiveConfig(n=N_CASES, seed=3, workers=1), PhantomConfig(size=96))
    db_url = f"sqlite:///{root / 'archive.sqlite'}"
    store = open_store(db_url)
    ingest_paths([archive], store, load_stand_in("stand-in"), IngestConfig(workers=0),
                 labels=read_label_csv(archive / "labels.csv"))  # fmt: skip
    store.close()
    return {"root": root, "db_url": db_url, "anchors": anchors, "saved_env": saved,
            "audit": root / "audit.jsonl"}  # fmt: skip


def restore(world: dict) -> None:
    os.environ.clear()
    os.environ.update(world["saved_env"])


def launch(world: dict, **overrides):  # noqa: ANN201
    users = [(name, ROLE[name], PASSWORD[name]) for name in ROLE]
    return ui_browser._launch(world, users=users, **overrides)


def forget_sign_ins(world: dict) -> None:
    """Forget every sign-in count of the world's store (between tests that fail on purpose)."""
    import sqlite3

    db = world["db_url"].removeprefix("sqlite:///")
    connection = sqlite3.connect(db, timeout=60)
    try:
        with connection:
            connection.execute("DELETE FROM sign_in_counts")
    except sqlite3.OperationalError:  # a store of before the counts were kept in it
        pass
    finally:
        connection.close()


def client(base: str, user: str | None = None) -> httpx.Client:
    """An HTTP client, signed in as ``user`` (a key of PASSWORD) when given."""
    session = httpx.Client(base_url=base, timeout=60)
    if user is not None:
        answer = session.post("login", data={"username": user, "password": PASSWORD[user]})
        assert answer.status_code == 200, answer.text[:200]
    return session


def dependencies(session: httpx.Client) -> list[dict]:
    return session.get("config").json()["dependencies"]


def fn_index(session: httpx.Client, elem_id: str, trigger: str) -> int:
    """The page's event of ``trigger`` ("click", "submit", ...) on the widget ``elem_id``."""
    config = session.get("config").json()
    ids = {c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == elem_id}
    for dep in config["dependencies"]:
        if any(t[0] in ids and t[1] == trigger for t in dep["targets"]):
            return int(dep["id"])
    raise AssertionError(f"no {trigger} event on #{elem_id}")


def component_props(session: httpx.Client, elem_id: str) -> dict:
    config = session.get("config").json()
    return next(c["props"] for c in config["components"] if c["props"].get("elem_id") == elem_id)


def event_data(session: httpx.Client, index: int, values: dict) -> list:
    """The inputs of event ``index`` in order: ``values[elem_id]`` where given, else the widget's
    value on the page (states: None, the server keeps them per session)."""
    config = session.get("config").json()
    props = {c["id"]: c.get("props", {}) for c in config["components"]}
    dep = next(d for d in config["dependencies"] if int(d["id"]) == index)
    data = []
    for input_id in dep["inputs"]:
        p = props.get(input_id, {})
        data.append(values[p["elem_id"]] if p.get("elem_id") in values else p.get("value"))
    return data


def opening(session: httpx.Client, case: str, finding: str) -> tuple[int, list]:
    """The page's "open case" event (it opens the case and searches it) and its inputs for
    ``case`` under ``finding``, the other widgets as the page shows them."""
    index = fn_index(session, "load-case", "click")
    return index, event_data(session, index, {"case-id": case, "finding": finding})


def call(session: httpx.Client, index: int, data: list, timeout: float = 120,
         session_hash: str | None = None) -> tuple[int, dict]:  # fmt: skip
    """Join the event queue as the page does; (join status, the completion message or {}).
    One ``session_hash`` for several calls shares the server's per-session state (the query)."""
    session_hash = session_hash or uuid.uuid4().hex[:11]
    body = json.dumps(
        {
            "data": data,
            "fn_index": index,
            "session_hash": session_hash,
            "event_data": None,
            "trigger_id": None,
        }
    )  # fmt: skip  (json.dumps writes NaN and Infinity as the page's JS never would)
    joined = session.post(
        "gradio_api/queue/join", content=body, headers={"Content-Type": "application/json"}
    )
    if joined.status_code != 200:
        return joined.status_code, {}
    with session.stream(
        "GET", f"gradio_api/queue/data?session_hash={session_hash}", timeout=timeout
    ) as stream:
        for line in stream.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") == "process_completed":
                return 200, message
    return 200, {}


def answer_text(message: dict) -> str:
    """Everything a completed event sent back, as one string."""
    return json.dumps(message.get("output", {}), ensure_ascii=False)
