"""Issue 23, finding 3: damaged, swapped or unreadable feature cache files are never served; issue
36, finding 4: nor one whose record's SHA-256 was recomputed by someone without the install's key.

Each case damages the Edema/softmax entry of a features folder the way a faulty disk, a careless
copy or a stray process would, then a fresh service (a new process' view) searches: its scores must
equal a clean recomputation's, the damage must be noticed (``FeatureCache.rejected``) and no
search may fail. A read-only or full folder: searches go on from memory with one warning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from adv_faults import mount_tmpfs, unmount
from ingest_fixtures import write_archive

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit import AuditConfig
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.index import IndexConfig
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest
from chexretrieve.store import open_store


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("feature-cache")
    write_archive(root / "archive", 30, size=32)
    store = open_store(f"sqlite:///{root / 'store.sqlite'}")
    ingest_paths([root / "archive"], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    clean = root / "clean"
    service = _service(store, clean)
    case = int(service.gallery.image_ids[0])
    edema = SearchRequest(finding="Edema", geometry="softmax", case_id=case, top_k=5)
    other = SearchRequest(finding="Pneumothorax", geometry="softmax", case_id=case, top_k=5)
    reference = service.gallery_scores(edema)[0]
    edema_files = set(clean.glob("*.npy"))
    service.gallery_scores(other)
    other_files = set(clean.glob("*.npy")) - edema_files
    assert len(edema_files) == len(other_files) == 1, (edema_files, other_files)
    yield store, clean, edema, reference, edema_files.pop().name, other_files.pop().name
    store.close()


def _service(store, folder: Path):  # noqa: ANN001, ANN202
    config = AppConfig(
        store.config.url,
        search=SearchConfig(feature_cache_dir=folder),
        audit=AuditConfig(enabled=False),
        index=IndexConfig(enabled=False),  # the feature cache itself (the archive index's tests:
    )  # tests/index)
    return open_search_app(config, store=store, encoder=StandInEncoder(dim=32)).service


def _consistent_record(npy: Path) -> None:
    """Rewrite the entry's record to match its (damaged) payload: damage a record cannot see."""
    record_file = npy.with_suffix(".json")
    record = json.loads(record_file.read_text())
    data = npy.read_bytes()
    record.update(payload_sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    record_file.write_text(json.dumps(record))


def _damage(name: str, folder: Path, edema: str, other: str) -> None:
    target, source = folder / edema, folder / other
    if name == "another finding's .npy copied in":
        shutil.copy(source, target)
    elif name == "another finding's .npy and record copied in":
        shutil.copy(source, target)
        shutil.copy(source.with_suffix(".json"), target.with_suffix(".json"))
    elif name == "symlink to another finding's file":
        target.unlink()
        target.symlink_to(source)
    elif name == "symlink to another finding's file and record":
        for suffix in (".npy", ".json"):
            target.with_suffix(suffix).unlink()
            target.with_suffix(suffix).symlink_to(source.with_suffix(suffix))
    elif name == "flipped payload bytes":
        data = bytearray(target.read_bytes())
        for i in range(len(data) - 64, len(data), 7):
            data[i] ^= 0x5A
        target.write_bytes(bytes(data))
    elif name in ("all NaN, record matching", "all zero, record matching"):
        rows = np.load(target)
        np.save(target, np.full_like(rows, np.nan if "NaN" in name else 0.0))
        _consistent_record(target)
    elif name == "rows reordered, record's SHA-256 recomputed":  # issue 36, finding 4
        rows = np.load(target)
        np.save(target, np.ascontiguousarray(rows[::-1]))
        _consistent_record(target)
    elif name == "zero-byte file":
        target.write_bytes(b"")
    elif name == "half a file":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    elif name == "record missing":
        target.with_suffix(".json").unlink()
    elif name == "record is garbage":
        target.with_suffix(".json").write_bytes(b"\x00\xffnot json")
    elif name == "a folder in its place":
        target.unlink()
        target.mkdir()
        (target / "x").write_text("x")
    elif name == "a FIFO in its place":
        target.unlink()
        os.mkfifo(target)
    else:  # pragma: no cover
        raise AssertionError(name)


DAMAGE = [
    "another finding's .npy copied in",
    "another finding's .npy and record copied in",
    "symlink to another finding's file",
    "symlink to another finding's file and record",
    "flipped payload bytes",
    "all NaN, record matching",
    "all zero, record matching",
    "rows reordered, record's SHA-256 recomputed",
    "zero-byte file",
    "half a file",
    "record missing",
    "record is garbage",
    "a folder in its place",
    "a FIFO in its place",
]


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_entry_is_recomputed_never_served(archive, tmp_path, cases, name):
    store, clean, edema, reference, edema_file, other_file = archive
    folder = tmp_path / "features"
    shutil.copytree(clean, folder)
    _damage(name, folder, edema_file, other_file)
    service = _service(store, folder)
    failure = None
    try:
        scores = service.gallery_scores(edema)[0]
        again = _service(store, folder).gallery_scores(edema)[0]  # what the next process sees
    except Exception as exc:  # noqa: BLE001 - a failing search is the finding
        failure = f"{type(exc).__name__}: {exc}"
        scores = again = None
    entry = folder / edema_file
    replaced = not entry.is_symlink() and entry.is_file()
    checks = {
        "no search fails": failure is None,
        "scores equal a clean recomputation": scores is not None
        and np.array_equal(scores, reference)
        and np.array_equal(again, reference),
        "the damage was noticed": bool(service.cache.rejected) and service.cache.computed == 1,
        "the entry is rewritten (a folder is left alone)": replaced
        if name != "a folder in its place"
        else entry.is_dir(),
        "the other finding's file is untouched": (folder / other_file).is_file(),
    }
    for check, ok in checks.items():
        cases.check(f"{name}: {check}", ok, f"{failure} {service.cache.rejected[:1]}")
    assert all(checks.values()), (checks, failure, service.cache.rejected)


def _fill(folder: Path) -> None:
    """Write a filler file until the file system is full."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def _requests(edema: SearchRequest) -> list[SearchRequest]:
    return [
        SearchRequest(finding=f, geometry=g, case_id=edema.case_id, top_k=5)
        for f in ("Edema", "Pneumothorax", "Cardiomegaly")
        for g in ("softmax", "gaussian")
    ]


@pytest.mark.parametrize("how", ["read-only mount", "full disk"])
def test_an_unwritable_cache_folder_costs_one_warning_and_no_search(
    archive, tmp_path, caplog, cases, how
):
    store, _, edema, reference, _, _ = archive
    folder = tmp_path / "features"
    mounted = mount_tmpfs(folder, "64k" if how == "full disk" else "1m")
    method = "tmpfs" if mounted else "fallback"
    restore = None
    try:
        if mounted and how == "read-only mount":
            import subprocess

            ro = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
            method = "tmpfs remounted ro" if ro.returncode == 0 else "fallback"
        if mounted and how == "full disk":
            _fill(folder)
            method = "tmpfs filled"
        if method == "fallback":
            if how == "read-only mount":  # the folder's place is taken by a file: mkdir fails
                if mounted:
                    unmount(folder)
                    mounted = False
                shutil.rmtree(folder, ignore_errors=True)
                folder.write_text("not a folder")
            else:  # every write reports a full disk
                real = os.write

                def full(fd, data):  # noqa: ANN001, ANN202
                    if ".tmp" in os.readlink(f"/proc/self/fd/{fd}"):
                        raise OSError(errno.ENOSPC, "No space left on device")
                    return real(fd, data)

                os.write, restore = full, real
        caplog.set_level(logging.WARNING, logger="chexretrieve.search.features")
        service = _service(store, folder)
        failure = None
        try:
            scores = service.gallery_scores(edema)[0]
            for request in _requests(edema):
                service.search(request)
        except Exception as exc:  # noqa: BLE001
            failure = f"{type(exc).__name__}: {exc}"
            scores = None
    finally:
        if restore is not None:
            os.write = restore
        if mounted:
            unmount(folder)
    warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    checks = {
        "no search fails": failure is None,
        "scores equal a clean recomputation": scores is not None
        and np.array_equal(scores, reference),
        "exactly one warning": len(warnings) == 1,
    }
    for check, ok in checks.items():
        cases.check(f"{how} ({method}): {check}", ok, f"{failure} {len(warnings)}")
    assert all(checks.values()), (checks, failure, [w.getMessage() for w in warnings])


def test_files_are_written_with_a_record_and_fsync_before_the_rename(
    archive, tmp_path, monkeypatch, cases
):
    store, _, edema, _, _, _ = archive
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):  # noqa: ANN001, ANN202
        events.append("fsync:" + os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1])
        return real_fsync(fd)

    def replace(src, dst):  # noqa: ANN001, ANN202
        events.append(f"rename:{Path(src).name}")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    _service(store, tmp_path / "features").gallery_scores(edema)
    monkeypatch.undo()
    renames = [i for i, e in enumerate(events) if e.startswith("rename:")]
    ok = len(renames) == 2 and all(
        events[i - 1] == "fsync:" + events[i].split(":", 1)[1] for i in renames
    )
    names = sorted(p.suffix for p in (tmp_path / "features").iterdir())
    ok = ok and names == [".json", ".npy"]
    cases.check("payload and record each fsync'ed before their rename", ok, str(events))
    assert ok, events
