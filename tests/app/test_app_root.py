"""The composition root (chexretrieve.app) and what the CLI does with it (issue 15 defect 8).

Every searching entry point opens its store, encoder and audit trail through ``open_search_app``:
a CLI search is in the audit file, read commands never create a store, a busy port is one line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chexretrieve.app import AppConfig, open_search_app, resolve_read_store
from chexretrieve.audit import AuditConfig
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest
from chexretrieve.store import open_store

REPO = Path(__file__).resolve().parents[2]
ENCODER = "stand-in:0:32"


@pytest.fixture(scope="module")
def archive_db(tmp_path_factory) -> Path:
    """A 12-image PNG archive ingested with the stand-in encoder; the SQLite file's path."""
    root = tmp_path_factory.mktemp("archive")
    rng = np.random.default_rng(0)
    for i in range(12):
        pixels = (rng.random((64, 64)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / f"case{i:02d}.png")
    db = root / "store.sqlite"
    store = open_store(f"sqlite:///{db}")
    ingest_paths([root], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    store.close()
    return db


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "CHEXRETRIEVE_TEST_ENCODERS": "1",
        "COLUMNS": "200",
        "PYTHONPATH": str(REPO),
        **(env or {}),
    }
    environment.pop("CHEXRETRIEVE_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "chexretrieve", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
    )


def test_a_cli_search_is_written_to_the_audit_trail(archive_db, tmp_path):
    audit = tmp_path / "audit.jsonl"
    done = _cli(
        "search",
        "--db",
        f"sqlite:///{archive_db}",
        "--encoder",
        ENCODER,
        "--case",
        "3",
        "--finding",
        "Pleural Effusion",
        "--json",
        cwd=tmp_path,
        env={"CHEXRETRIEVE_AUDIT_LOG": str(audit), "CHEXRETRIEVE_USER": "dr.cli"},
    )
    assert done.returncode == 0, done.stderr
    shown = [hit["case"] for hit in json.loads(done.stdout)["hits"]]
    assert shown and 3 not in shown
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert len(records) == 1
    record = records[0]
    assert record["action"] == "search" and record["user"] == "dr.cli"
    assert record["query"]["case"] == 3 and record["query"]["finding"] == "Pleural Effusion"
    assert [r["image"] for r in record["results"]] == shown


def test_the_ui_opens_the_root_and_audits(archive_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "ui-audit.jsonl"))
    from chexretrieve.ui.app import open_case_lookup
    from chexretrieve.ui.config import UIConfig

    lookup, _ = open_case_lookup(
        UIConfig(
            db_url=f"sqlite:///{archive_db}",
            encoder=ENCODER,
            feature_cache_dir=tmp_path / "features",
        )
    )
    assert lookup.service.audit is not None
    assert lookup.service.audit.path == tmp_path / "ui-audit.jsonl"
    lookup.service.search(SearchRequest(finding="Edema", case_id=2), user="dr.ui")
    records = [json.loads(line) for line in (tmp_path / "ui-audit.jsonl").read_text().splitlines()]
    assert [(r["action"], r["user"], r["query"]["case"]) for r in records] == [
        ("search", "dr.ui", 2)
    ]


def test_open_search_app_turns_the_audit_off_only_when_asked(archive_db, tmp_path):
    config = AppConfig(
        db_url=f"sqlite:///{archive_db}",
        search=SearchConfig(feature_cache_dir=tmp_path / "f"),
        audit=AuditConfig(enabled=False),
    )
    app = open_search_app(config, encoder=StandInEncoder(dim=32))
    assert app.audit is None and app.service.audit is None
    assert app.service.search(SearchRequest(finding="Edema", case_id=1, top_k=3)).hits
    with pytest.raises(ValueError, match="holds no embeddings of encoder 'stand-in:d8'"):
        open_search_app(config, encoder=StandInEncoder(dim=8))


def test_search_without_db_and_no_store_explains_and_creates_nothing(tmp_path):
    done = _cli("search", "--case", "1", "--finding", "Edema", cwd=tmp_path)
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert "no store to search" in message and "--db" in message and "make demo" in message
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no empty ./chexretrieve.sqlite left behind


def test_search_with_a_missing_db_file_refuses_and_creates_nothing(tmp_path):
    missing = tmp_path / "typo.sqlite"
    done = _cli(
        "search", "--db", f"sqlite:///{missing}", "--case", "1", "--finding", "Edema", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "no chexretrieve store at" in " ".join(done.stderr.split())
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_search_without_db_uses_the_demo_store(archive_db, tmp_path):
    demo = tmp_path / "data" / "demo"
    demo.mkdir(parents=True)
    (demo / "chexretrieve.sqlite").write_bytes(archive_db.read_bytes())
    done = _cli(
        "search",
        "--encoder",
        ENCODER,
        "--case",
        "5",
        "--finding",
        "Edema",
        "--json",
        cwd=tmp_path,
        env={"CHEXRETRIEVE_AUDIT_LOG": str(tmp_path / "audit.jsonl")},
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["hits"]) == 10
    assert not (tmp_path / "chexretrieve.sqlite").exists()


def test_read_store_rule_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHEXRETRIEVE_DB", raising=False)
    with pytest.raises(ValueError, match="no store to search"):
        resolve_read_store(None)
    (tmp_path / "data" / "demo").mkdir(parents=True)
    (tmp_path / "data" / "demo" / "chexretrieve.sqlite").touch()
    assert resolve_read_store(None).endswith("data/demo/chexretrieve.sqlite")
    (tmp_path / "chexretrieve.sqlite").touch()
    assert resolve_read_store(None) == "sqlite:///chexretrieve.sqlite"
    monkeypatch.setenv("CHEXRETRIEVE_DB", "sqlite:///elsewhere.sqlite")
    assert resolve_read_store(None) == "sqlite:///elsewhere.sqlite"
    assert resolve_read_store("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


@pytest.fixture
def busy_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_serve_and_demo_on_a_busy_port_say_so_in_one_line(command, busy_port, tmp_path):
    extra = ["--data-dir", str(tmp_path / "demo")] if command == "demo" else []
    done = _cli(command, "--port", str(busy_port), *extra, cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"port {busy_port}" in lines[0] and "--port" in lines[0]
    assert "already in use" in lines[0]
    assert not (tmp_path / "demo").exists()  # refused before any work


def test_make_demo_passes_port():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    make = subprocess.run(
        ["make", "-n", "demo", "PORT=7999"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert "-m chexretrieve demo --port 7999" in make.stdout
    plain = subprocess.run(["make", "-n", "demo"], cwd=REPO, capture_output=True, text=True)
    assert "-m chexretrieve demo" in plain.stdout and "--port" not in plain.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["anchors", "impact", "pleural_effusion.a@1", "pleural_effusion.b@1"],
        ["anchors", "embed", "pleural_effusion.a@1"],
        ["eval", "retrieval", "--quiet"],
    ],
    ids=["anchors impact", "anchors embed", "eval retrieval"],
)
def test_other_readers_of_a_store_never_create_one(command, tmp_path):
    missing = tmp_path / "typo.sqlite"
    done = _cli(*command, "--db", f"sqlite:///{missing}", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no chexretrieve store at" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert not missing.exists()


@pytest.mark.parametrize("command", ["search", "serve"])
def test_help_of_db_states_the_rule_the_command_follows(command, tmp_path):
    """`--help` once said --db defaulted to the demo file while the command created an empty
    ./chexretrieve.sqlite (issue 15 defect 8): the help names the order resolve_read_store uses."""
    done = _cli(command, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.replace("│", " ").split())
    rule = text[text.index("--db") :]
    order = [rule.index(name) for name in ("$CHEXRETRIEVE_DB", "./chexretrieve.sqlite", "demo")]
    assert order == sorted(order) and "none is ever created" in rule
    assert not any(tmp_path.iterdir())  # asking for help writes nothing
