"""Issue 23, finding 2: a running search service sees new cases in its next search.

The service (built as every entry point builds it, ``open_search_app``) answers searches from a
thread the whole time a second process (``chexretrieve ingest``) writes new images into its store.
Every search must succeed; the first search after the ingest must cover every new candidate, find
a new case by its own embedding first, and rank exactly as a fresh process over the grown archive
does (its features in the archive index extended by the new rows only by the ingest's update,
checked against a full recomputation without the index).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
from adv_support import REPO
from ingest_fixtures import write_archive

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit import AuditConfig
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.index import IndexConfig
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest
from chexretrieve.store import open_store

FIRST, LATER = 40, 48


def _service(store, folder, index: bool = True):  # noqa: ANN001, ANN202
    config = AppConfig(
        store.config.url,
        search=SearchConfig(feature_cache_dir=folder),
        audit=AuditConfig(enabled=False),
        # the archive index (float32: exactly the in-memory features), or none: all recomputed
        index=IndexConfig(enabled=index, feature_dtype="float32", density=False),
    )
    return open_search_app(config, store=store, encoder=StandInEncoder(dim=32)).service


def _gaussian_entry(service) -> tuple[str, int]:  # noqa: ANN001
    """(file, rows) of the archive index's Edema / Gaussian features (appended in place when the
    archive grows, never recomputed)."""
    manifest = service.index.manifest()
    found = [e for e in manifest.entries.values()
             if e["finding"] == "Edema" and e["geometry"] == "gaussian"]  # fmt: skip
    return (found[0]["file"]["file"], found[0]["file"]["rows"]) if found else ("", 0)


def test_an_ingest_while_the_service_answers_shows_in_the_next_search(tmp_path, cases):
    write_archive(tmp_path / "first", FIRST, size=32)
    write_archive(tmp_path / "later", LATER, size=32, start=FIRST)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    ingest_paths([tmp_path / "first"], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    service = _service(store, tmp_path / "features")
    case = int(service.gallery.image_ids[0])
    request = SearchRequest(finding="Edema", geometry="gaussian", case_id=case, top_k=5)
    before = service.search(request)
    before_ids = set(service.gallery.image_ids.tolist())
    gaussian = _gaussian_entry(service)
    errors: list[str] = []
    seen: list[int] = []
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            try:
                seen.append(service.search(request).candidates)
            except Exception as exc:  # noqa: BLE001 - every failure is a finding
                errors.append(f"{type(exc).__name__}: {exc}")
            done.wait(0.02)

    searcher = threading.Thread(target=answer)
    searcher.start()
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1", "COLUMNS": "200"}
    ingest = subprocess.run(
        [sys.executable, "-m", "chexretrieve", "ingest", str(tmp_path / "later"), "--db", url,
         "--encoder", "stand-in", "--batch-size", "8", "--workers", "1", "--no-progress"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    done.set()
    searcher.join(120)
    after = service.search(request)
    gallery = service.gallery
    new_ids = sorted(set(gallery.image_ids.tolist()) - before_ids)
    newest = new_ids[-1] if new_ids else None
    by_new = (
        service.search(
            SearchRequest(
                finding="Edema",
                geometry="gaussian",
                image_embedding=gallery.embeddings[gallery.row_of(newest)],
                top_k=3,
            )
        )
        if newest is not None
        else None
    )
    fresh = _service(store, tmp_path / "fresh-features", index=False)  # all recomputed
    full = fresh.gallery_scores(request)[0]
    grown = service.gallery_scores(request)[0]
    checks = {
        "ingest ran": ingest.returncode == 0 and len(before_ids) == FIRST,
        "no search failed during the ingest": not errors,
        "searches answered during the ingest": len(seen) > 0,
        "next search covers every new candidate": after.candidates
        == before.candidates + LATER
        == fresh.search(request).candidates,
        "a new case is found by its own embedding": by_new is not None
        and by_new.hits[0].image_id == newest,
        "features extended by the new rows": _gaussian_entry(service)
        == (gaussian[0], FIRST + LATER),
        "extended features rank as a full recomputation": np.allclose(grown, full, atol=1e-5)
        and [h.image_id for h in after.hits] == [h.image_id for h in fresh.search(request).hits],
    }
    for name, ok in checks.items():
        cases.check(name, ok, f"{errors[:2]} {ingest.stderr[-300:]}")
    cases.figure("searches during ingest", len(seen))
    cases.figure("candidates before / after", f"{before.candidates} / {after.candidates}")
    store.close()
    assert all(checks.values()), (checks, errors[:3], ingest.stderr[-1000:])


def test_the_revision_is_read_once_per_search_and_an_unchanged_archive_is_not_reloaded(
    tmp_path, cases
):
    write_archive(tmp_path / "a", 12, size=32)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    ingest_paths([tmp_path / "a"], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    service = _service(store, tmp_path / "features")
    reads, loads = [], []
    revision, load = service._revision, service._load_gallery
    service._revision = lambda: reads.append(1) or revision()
    service._load_gallery = lambda: loads.append(1) or load()
    case = int(service.gallery.image_ids[0])
    for _ in range(5):
        service.search(SearchRequest(finding="Edema", case_id=case, top_k=3))
    store.set_labels(case, {"Edema": 1.0})  # bumps the revision: one reload, then none
    for _ in range(3):
        service.search(SearchRequest(finding="Edema", case_id=case, top_k=3))
    ok = len(loads) == 2 and len(reads) <= 2 + 8
    cases.check("one revision query per search; reload only when it moved", ok, f"{loads} {reads}")
    store.close()
    assert ok, (loads, reads)


def test_an_unreadable_revision_refuses_the_search_in_one_line(tmp_path, cases):
    write_archive(tmp_path / "a", 8, size=32)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    ingest_paths([tmp_path / "a"], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    service = _service(store, tmp_path / "features")
    case = int(service.gallery.image_ids[0])

    def unreachable() -> int:
        raise ConnectionError("server closed the connection unexpectedly")

    service._revision = unreachable
    try:
        service.search(SearchRequest(finding="Edema", case_id=case, top_k=3))
        message = ""
    except ValueError as exc:
        message = str(exc)
    ok = "revision" in message and "refused" in message and "\n" not in message
    cases.check("database gone: the search is refused, not answered stale", ok, message)
    store.close()
    assert ok, message
