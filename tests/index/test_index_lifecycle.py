"""The archive index over time: damaged or stale files rebuilt and never served, an update that
appends instead of recomputing, a publication switching every search at once, the first use of
another geometry prepared in the background (issue 31)."""

from __future__ import annotations

import copy
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from index_fixtures import ENCODER_ID, add_images, make_store, stand_in

import chexretrieve.index.builder as builder_module
from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit.config import AuditConfig
from chexretrieve.density.config import DensityConfig
from chexretrieve.index import IndexConfig, IndexDamaged, index_folder, read_manifest
from chexretrieve.index.manifest import build_lock
from chexretrieve.index.rowfile import HEADER_BYTES, forget_verified
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import FeaturesBeingPrepared, SearchRequest

FINDING = "Pleural Effusion"
ROOT = Path(__file__).resolve().parents[2]


def app_config(tmp_path: Path, anchors: Path | None = None, **index) -> AppConfig:
    return AppConfig(
        encoder="stand-in:0:32",
        anchors_dir=anchors,
        search=SearchConfig(feature_cache_dir=tmp_path / "features"),
        audit=AuditConfig(enabled=False),
        density=DensityConfig(candidates=(1, 2)),
        index=IndexConfig(**{"density": False, **index}),
    )


def ranking(service, case: int = 9, geometry: str = "softmax", finding: str = FINDING):
    result = service.search(SearchRequest(finding=finding, geometry=geometry, case_id=case,
                                          top_k=15))  # fmt: skip
    return [(h.image_id, h.score) for h in result.hits], result


def folder_of(store) -> Path:
    return index_folder(store, ENCODER_ID, IndexConfig())


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x5A]))


@pytest.fixture
def world(tmp_path):
    store = make_store(tmp_path / "archive.sqlite", 2000)
    yield tmp_path, store
    store.close()


# ------------------------------------------------------------------------------ damage
def test_a_damaged_feature_file_is_rebuilt_and_never_served(world) -> None:
    tmp_path, store = world
    service = open_search_app(app_config(tmp_path), store=store, encoder=stand_in()).service
    before, _ = ranking(service)
    manifest = read_manifest(folder_of(store))
    entry = next(e for e in manifest.entries.values() if e["finding"] == FINDING)
    damaged = folder_of(store) / entry["file"]["file"]
    flip_byte(damaged, HEADER_BYTES + 1000 * entry["file"]["width"] * 2 + 3)
    forget_verified()  # as a new process would start
    fresh = open_search_app(app_config(tmp_path), store=store, encoder=stand_in()).service
    after, _ = ranking(fresh)
    assert after == before
    now = read_manifest(folder_of(store))
    rebuilt = next(e for e in now.entries.values() if e["finding"] == FINDING)
    assert rebuilt["file"]["file"] != entry["file"]["file"]
    assert not damaged.exists()  # the damaged file is no longer kept


def test_a_damaged_archive_file_is_rebuilt_from_the_store(world) -> None:
    tmp_path, store = world
    service = open_search_app(app_config(tmp_path), store=store, encoder=stand_in()).service
    before, _ = ranking(service, geometry="cosine")
    manifest = read_manifest(folder_of(store))
    labels = folder_of(store) / manifest.file("labels").file
    flip_byte(labels, HEADER_BYTES + 5)
    forget_verified()
    fresh = open_search_app(app_config(tmp_path), store=store, encoder=stand_in()).service
    after, _ = ranking(fresh, geometry="cosine")
    assert after == before
    assert read_manifest(folder_of(store)).file("labels").file != manifest.file("labels").file


def test_an_embedding_damaged_after_open_fails_the_search_and_is_rebuilt(world) -> None:
    tmp_path, store = world
    service = open_search_app(app_config(tmp_path), store=store, encoder=stand_in()).service
    before, _ = ranking(service, case=1500)
    manifest = read_manifest(folder_of(store))
    record = manifest.file("embeddings")
    row = service.gallery.row_of(1500)
    flip_byte(folder_of(store) / record.file, HEADER_BYTES + row * record.row_bytes + 4)
    forget_verified()
    with pytest.raises(IndexDamaged, match="do not match the index's seal"):
        ranking(service, case=1500)  # the damaged row is refused ...
    after, _ = ranking(service, case=1500)  # ... and the next search reads the rebuilt index
    assert after == before


def test_a_forged_or_foreign_manifest_is_never_read(world) -> None:
    tmp_path, store = world
    open_search_app(app_config(tmp_path), store=store, encoder=stand_in())
    folder = folder_of(store)
    manifest = read_manifest(folder)
    path = folder / f"manifest-{manifest.generation:08d}.json"
    record = json.loads(path.read_text())
    record["inputs"]["rows"] = 10  # an edit without the install's key
    path.write_text(json.dumps(record))
    from chexretrieve.index import IndexUnavailable

    with pytest.raises(IndexUnavailable, match="seal"):
        read_manifest(folder)
    # a command rebuilds it; the rebuilt generation is sealed again
    open_search_app(app_config(tmp_path), store=store, encoder=stand_in())
    assert read_manifest(folder).rows == 2000


def test_an_index_of_another_store_is_stale_and_rebuilt(world, tmp_path) -> None:
    _, store = world
    open_search_app(app_config(tmp_path), store=store, encoder=stand_in())
    other = make_store(tmp_path / "other.sqlite", 300)
    try:
        shutil.copytree(folder_of(store), folder_of(other))  # another store's index copied in
        service = open_search_app(app_config(tmp_path), store=other, encoder=stand_in()).service
        assert len(service.gallery) == 300
        assert read_manifest(folder_of(other)).content["store"] == other.label
    finally:
        other.close()


# ------------------------------------------------------------------------------ updates
def test_new_images_are_appended_without_recomputing_the_archive(world, monkeypatch) -> None:
    tmp_path, store = world
    service = open_search_app(app_config(tmp_path, density=True), store=store,
                              encoder=stand_in()).service  # fmt: skip
    ranking(service)
    old = read_manifest(folder_of(store))
    new_ids = add_images(store, 2000, 1000)

    def read_again(*args, **kwargs):
        pytest.fail("the whole archive was read again")

    monkeypatch.setattr(type(store), "archive_chunk", read_again)
    computed: list[tuple[int, int]] = []
    real_extend = builder_module.extend_entry

    def extend(folder, entry, *args, **kwargs):
        computed.append((int(entry["file"]["rows"]), 0))
        return real_extend(folder, entry, *args, **kwargs)

    monkeypatch.setattr(builder_module, "extend_entry", extend)
    from chexretrieve.app.index_commands import build_index

    manifest = build_index(store, stand_in(), app_config(tmp_path, density=True))
    assert manifest.rows == 3000 and manifest.revision == store.archive_revision()
    assert computed and all(start == 2000 for start, _ in computed)  # only the new rows
    from chexretrieve.index.rowfile import MappedRows

    for name in ("image_ids", "embeddings", "labels"):  # appended in place, first rows kept
        assert manifest.file(name).file == old.file(name).file
        MappedRows(old.folder, old.file(name)).verify()  # a reader of the old generation
    for key, entry in manifest.entries.items():
        assert entry["file"]["file"] == old.entries[key]["file"]["file"]
        assert entry["file"]["rows"] == 3000
    assert manifest.content["density"]["scored_rows"] == 3000
    # the running service's next search sees the new cases
    hits, _ = ranking(service, case=new_ids[-1])
    assert len(service.gallery) == 3000 and new_ids[-1] in service.gallery
    assert any(i in set(new_ids) for i, _ in hits)


def test_changed_labels_rewrite_the_labels_and_recalibrate(world) -> None:
    tmp_path, store = world
    service = open_search_app(app_config(tmp_path), store=store, encoder=stand_in()).service
    ranking(service)
    old = read_manifest(folder_of(store))
    image = int(service.gallery.image_ids[10])
    store.set_labels(image, {FINDING: 1.0, "Edema": 0.0})
    from chexretrieve.app.index_commands import build_index

    manifest = build_index(store, stand_in(), app_config(tmp_path))
    assert manifest.file("labels").file != old.file("labels").file  # rewritten, not edited
    assert manifest.file("embeddings").file == old.file("embeddings").file
    assert ranking(service)[1].candidates == 2000 - 2  # the same archive, own study excluded
    gallery = service.current_gallery()
    assert gallery.labels_of(image)[FINDING] == 1.0
    for entry in manifest.entries.values():
        assert entry["calibrations"]["12"]["labels_revision"] == manifest.revision


# ------------------------------------------------------------------------- publication
def test_publishing_a_version_switches_every_search_at_once(world, tmp_path) -> None:
    _, store = world
    anchors = tmp_path / "anchors"
    shutil.copytree(ROOT / "anchors", anchors)
    config = app_config(tmp_path, anchors, prepare_in_request_below=0)
    open_search_app(config, store=store, encoder=stand_in())  # built with version 1
    from chexretrieve.ui.curation import DraftDesk, set_as_text

    app = open_search_app(config, store=store, encoder=stand_in(), background=True)
    service, index = app.service, app.service.index
    old = index.serving_key(FINDING)
    assert old == "pleural_effusion.a@1"
    committed: list[dict] = []
    real_commit = builder_module.commit

    def spy(folder, content, previous):
        committed.append(copy.deepcopy(content))
        return real_commit(folder, content, previous)

    builder_module.commit = spy
    desk = DraftDesk(anchors, store, stand_in(), lambda: service.gallery, index.jobs.publish)
    text = set_as_text(desk.get(old))
    lines = text.splitlines()
    edited = "\n".join(lines[:-1])  # one sentence fewer
    try:
        with build_lock(index.folder):  # the index is busy: the job waits for the lock
            saved = desk.publish(old, edited)
            assert saved.key == "pleural_effusion.a@2"
            _, result = ranking(service)
            assert result.anchor_set == old  # the old version keeps serving meanwhile
        index.jobs.wait(timeout=300)
    finally:
        builder_module.commit = real_commit
    _, result = ranking(service)
    assert result.anchor_set == "pleural_effusion.a@2"
    manifest = read_manifest(index.folder)
    assert manifest.serving[FINDING] == "pleural_effusion.a@2"
    assert not [e for e in manifest.entries.values() if e["anchor_key"] == old]
    for content in committed:  # no generation served a@2 before its entry was complete
        if content["serving"].get(FINDING) == "pleural_effusion.a@2":
            complete = [e for e in content["entries"].values()
                        if e["anchor_key"] == "pleural_effusion.a@2"
                        and e["file"]["rows"] == content["rows"] and e["calibrations"]]  # fmt: skip
            assert complete


# ------------------------------------------------------------------ first use, background
def test_another_geometry_is_prepared_in_the_background_not_in_the_request(world) -> None:
    tmp_path, store = world
    config = app_config(tmp_path, prepare_in_request_below=0)
    app = open_search_app(config, store=store, encoder=stand_in(), background=True)
    service = app.service
    gate = threading.Event()
    real_entry = builder_module.IndexBuilder.entry

    def slow(self, *args, **kwargs):
        gate.wait(timeout=300)
        return real_entry(self, *args, **kwargs)

    builder_module.IndexBuilder.entry = slow
    try:
        with pytest.raises(FeaturesBeingPrepared, match=r"being prepared \(\d+ %\)|queued"):
            ranking(service, geometry="gaussian")
        gate.set()
        service.index.jobs.wait(timeout=300)
    finally:
        builder_module.IndexBuilder.entry = real_entry
    hits, _ = ranking(service, geometry="gaussian")
    memory = open_search_app(app_config(tmp_path, enabled=False, feature_dtype="float16"),
                             store=store, encoder=stand_in()).service  # fmt: skip
    assert [i for i, _ in hits] == [i for i, _ in ranking(memory, geometry="gaussian")[0]] or (
        len(hits) == 15
    )
    assert np.isfinite([s for _, s in hits]).all()


def test_serve_opens_the_gallery_and_the_density_before_the_first_search(world) -> None:
    """`serve` (background=True) opens the index's gallery and loads its sealed density in a
    thread at start, so its first search reads neither; a command (background=False) opens them
    on its first search only. Both then rank the same."""
    import time

    tmp_path, store = world
    config = app_config(tmp_path, density=True)
    cold = open_search_app(config, store=store, encoder=stand_in()).service  # builds the index
    assert cold._gallery is None and cold.density.held() is None  # nothing read before a search
    served = open_search_app(config, store=store, encoder=stand_in(), background=True).service
    deadline = time.monotonic() + 120  # a hang guard, not a speed goal
    while served.density.held() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served._gallery is not None and served.density.held() is not None
    assert ranking(served)[0] == ranking(cold)[0]
    assert cold.density.held() is not None  # loaded by its first search


def test_the_background_verification_thread_alone_runs_nicer() -> None:
    """Linux schedules each thread as a task: the verifying thread's niceness rises by
    BACKGROUND_NICENESS (capped at 19) and the request threads keep the process's."""
    import os

    from chexretrieve.index.handle import BACKGROUND_NICENESS, lower_thread_priority

    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = {}

    def verify() -> None:
        lower_thread_priority()
        seen["thread"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    worker = threading.Thread(target=verify)
    worker.start()
    worker.join(timeout=60)
    assert seen["thread"] == min(19, main + BACKGROUND_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main
