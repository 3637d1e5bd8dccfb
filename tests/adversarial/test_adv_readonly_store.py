"""Issue 23, finding 9: read commands (``search``, ``serve``) never write the store (but for the
audit trail's anchor, issue 36: the one table they write, through a connection of their own).

A store whose anchor embeddings were never computed is searched: as a writable file (nothing may
be written), as an immutable file (``chattr +i``) and on a read-only mount (a tmpfs remounted
read-only). The searches must work (their anchors computed in memory, one warning saying how to
store them once), with no traceback. A store of a newer schema gives one line naming both
versions; an older one a message to run ``chexretrieve db upgrade``, and no read command migrates
it; ``db upgrade`` then does.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from adv_faults import mount_tmpfs, unmount
from adv_support import REPO, require
from ingest_fixtures import write_archive

from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store


def _revisions() -> list[str]:
    """The checkout's schema revisions, oldest first (read from db/ with Alembic itself)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(REPO / "db"))
    scripts = ScriptDirectory.from_config(config)
    return [r.revision for r in reversed(list(scripts.walk_revisions()))]


HEAD, PREVIOUS = _revisions()[-1], _revisions()[-2]


@pytest.fixture(scope="module")
def built_store(tmp_path_factory) -> Path:
    """A store of 16 images, closed (no WAL left), without any anchor embeddings."""
    root = tmp_path_factory.mktemp("ro-store")
    write_archive(root / "archive", 16, size=32)
    db = root / "store.sqlite"
    store = open_store(f"sqlite:///{db}")
    ingest_paths([root / "archive"], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    assert store.table_counts().get("anchor_embeddings", 0) == 0
    store.close()
    return db


def _copy(built: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "store.sqlite"
    shutil.copy(built, target)
    return target


def _env(tmp_path: Path) -> dict:
    return {
        **os.environ,
        "CHEXRETRIEVE_TEST_ENCODERS": "1",
        "COLUMNS": "200",
        "CHEXRETRIEVE_AUDIT_LOG": str(tmp_path / "audit" / "audit.jsonl"),
        "CHEXRETRIEVE_CACHE": str(tmp_path / "cache"),
    }


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chexretrieve", *args],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _search(tmp_path: Path, db: Path, geometry: str = "softmax") -> subprocess.CompletedProcess:
    url = f"sqlite:///{db}"
    return _cli(tmp_path, "search", "--db", url, "--encoder", "stand-in", "--case", "1",
                "--finding", "Edema", "--geometry", geometry, "--top-k", "3")  # fmt: skip


def _contents(db: Path) -> dict:
    """Every table's rows (read with sqlite3 in read-only mode: the check writes nothing)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = [
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        return {n: connection.execute(f'SELECT * FROM "{n}"').fetchall() for n in sorted(names)}
    finally:
        connection.close()


def _clean(run: subprocess.CompletedProcess) -> bool:
    return "Traceback" not in run.stdout + run.stderr


def test_search_and_serve_never_write_a_writable_store(
    built_store, tmp_path, monkeypatch, caplog, cases
):
    db = _copy(built_store, tmp_path / "w")
    before = _contents(db)
    run = _search(tmp_path, db)
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit2.jsonl"))
    caplog.set_level(logging.WARNING)
    from chexretrieve.ui.app import open_case_lookup
    from chexretrieve.ui.config import UIConfig
    from chexretrieve.ui.handlers import SearchSettings

    lookup, _ = open_case_lookup(
        UIConfig(db_url=f"sqlite:///{db}", encoder="stand-in", feature_cache_dir=tmp_path / "f")
    )
    query = lookup.load_case(1, user="dr.a")
    pages = [
        lookup.search(query, SearchSettings(finding=f, geometry=g), user="dr.a")
        for f in ("Edema", "Pneumothorax")
        for g in ("softmax", "cosine", "gaussian")
    ]
    lookup.service.audit.anchor.flush(60)
    lookup.service.anchors.store.close()
    warnings = [r.getMessage() for r in caplog.records if "anchors embed" in r.getMessage()]
    after = _contents(db)
    anchors = after.pop("audit_anchors")  # the one table a read command writes (issue 36)
    expected = before.pop("audit_anchors")
    checks = {
        "search CLI: results, exit 0": run.returncode == 0 and "Edema" in run.stdout,
        "search CLI: one warning saying how to store the anchors": (
            run.stderr.count("anchors embed") == 1
        ),
        "serve handlers: every search answered": all(p.image_ids for p in pages),
        "serve handlers: one warning": len(warnings) == 1,
        "the store is byte-for-byte unchanged in every table but the audit anchors": (
            after == before
        ),
        "the audit anchors: one row per trail, at its last record (2 trails, 1 and 7 records)": (
            expected == [] and sorted(row[4] for row in anchors) == [1, 7]
        ),
    }
    for name, ok in checks.items():
        cases.check(f"writable store: {name}", ok, run.stderr[-300:])
    assert all(checks.values()), (checks, run.stderr[-2000:], warnings)


def test_an_immutable_store_file_is_searched(built_store, tmp_path, cases):
    require(os.geteuid() == 0, "root, to set the immutable attribute (chattr +i)")
    db = _copy(built_store, tmp_path / "i")
    made = subprocess.run(["chattr", "+i", str(db)], capture_output=True)
    require(made.returncode == 0, f"chattr +i on {db}: {made.stderr!r}")
    try:
        runs = {g: _search(tmp_path, db, g) for g in ("softmax", "cosine")}
        ingest = _cli(tmp_path, "ingest", str(tmp_path), "--db", f"sqlite:///{db}",
                      "--encoder", "stand-in", "--no-progress")  # fmt: skip
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)
    checks = {
        f"search {g}: results, no traceback": r.returncode == 0
        and "Edema" in r.stdout
        and _clean(r)
        for g, r in runs.items()
    }
    checks["ingest: a clear refusal, no traceback"] = (
        ingest.returncode != 0 and _clean(ingest) and "read-only" in ingest.stderr + ingest.stdout
    )
    for name, ok in checks.items():
        cases.check(f"immutable file: {name}", ok, (runs["softmax"].stderr + ingest.stderr)[-400:])
    assert all(checks.values()), (
        checks,
        {g: r.stderr[-800:] for g, r in runs.items()},
        ingest.stderr[-800:],
        ingest.stdout[-800:],
    )


def test_a_store_on_a_read_only_mount_is_searched(built_store, tmp_path, cases):
    """A tmpfs remounted read-only; where mounting is not allowed, a folder made immutable
    (``chattr +i``: nothing can be created in it, by root either) stands for the mount."""
    folder = tmp_path / "mnt"
    mounted = mount_tmpfs(folder, "16m")
    how = "tmpfs remounted ro"
    try:
        db = _copy(built_store, folder)
        if mounted:
            remount = subprocess.run(
                ["mount", "-o", "remount,ro", str(folder)], capture_output=True
            )
            require(remount.returncode == 0, f"remount read-only: {remount.stderr!r}")
        else:
            how = "immutable folder"
            locked = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
            require(locked.returncode == 0, f"a tmpfs mount or chattr +i: {locked.stderr!r}")
        runs = {g: _search(tmp_path, db, g) for g in ("softmax", "cosine")}
        listing = sorted(p.name for p in folder.iterdir())
    finally:
        if mounted:
            unmount(folder)
        else:
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    checks = {
        f"search {g}: results, no traceback": r.returncode == 0
        and "Edema" in r.stdout
        and _clean(r)
        for g, r in runs.items()
    }
    checks["nothing created beside the file"] = listing == ["store.sqlite"]
    for name, ok in checks.items():
        cases.check(f"read-only mount ({how}): {name}", ok, runs["softmax"].stderr[-400:])
    assert all(checks.values()), (checks, {g: r.stderr[-800:] for g, r in runs.items()})


def _set_version(db: Path, version: str) -> None:
    connection = sqlite3.connect(db)
    with connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (version,))
    connection.close()


def _version(db: Path) -> str:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    finally:
        connection.close()


def test_a_store_of_a_newer_schema_gets_one_line(built_store, tmp_path, cases):
    db = _copy(built_store, tmp_path / "new")
    _set_version(db, "0099_future")
    search = _search(tmp_path, db)
    (tmp_path / "nothing").mkdir()
    ingest = _cli(tmp_path, "ingest", str(tmp_path / "nothing"), "--db", f"sqlite:///{db}",
                  "--encoder", "stand-in", "--no-progress")  # fmt: skip
    upgrade = _cli(tmp_path, "db", "upgrade", "--db", f"sqlite:///{db}")
    checks = {}
    for name, run in (("search", search), ("ingest", ingest), ("db upgrade", upgrade)):
        text = run.stdout + run.stderr
        checks[f"{name}: refused, names both versions, no traceback"] = (
            run.returncode != 0
            and "0099_future" in text
            and HEAD in text
            and _clean(run)
            and len(run.stderr.strip().splitlines()) <= 3
        )
    checks["the store is unchanged"] = _version(db) == "0099_future"
    for name, ok in checks.items():
        cases.check(f"newer schema: {name}", ok, (search.stderr + ingest.stderr)[-400:])
    assert all(checks.values()), (
        checks,
        search.stderr[-800:],
        ingest.stderr[-800:],
        upgrade.stderr[-500:],
    )


def test_an_older_store_is_never_migrated_by_a_read_command(built_store, tmp_path, cases):
    from alembic import command
    from alembic.config import Config

    db = _copy(built_store, tmp_path / "old")
    config = Config()
    config.set_main_option("script_location", str(REPO / "db"))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{db}")
    command.downgrade(config, "-1")
    assert _version(db) == PREVIOUS
    search = _search(tmp_path, db)
    version = _cli(tmp_path, "db", "version", "--db", f"sqlite:///{db}")
    after_search = _version(db)
    upgrade = _cli(tmp_path, "db", "upgrade", "--db", f"sqlite:///{db}")
    after_upgrade = _version(db)
    again = _search(tmp_path, db)
    checks = {
        "search: refused with `chexretrieve db upgrade`, no traceback": search.returncode == 2
        and "chexretrieve db upgrade" in " ".join(search.stderr.split())  # the line may wrap
        and _clean(search),
        "search migrated nothing": after_search == PREVIOUS,
        "db version names both": PREVIOUS in version.stdout and HEAD in version.stdout,
        "db upgrade: previous -> head": upgrade.returncode == 0
        and after_upgrade == HEAD
        and f"{PREVIOUS} -> " in upgrade.stdout,
        "search after the upgrade": again.returncode == 0 and "Edema" in again.stdout,
    }
    for name, ok in checks.items():
        cases.check(f"older schema: {name}", ok, (search.stderr + upgrade.stderr)[-400:])
    assert all(checks.values()), (
        checks,
        search.stderr[-800:],
        upgrade.stderr[-800:],
        again.stderr[-800:],
    )
