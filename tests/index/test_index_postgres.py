"""A PostgreSQL store gets the same archive index, in the folder ``$CHEXRETRIEVE_INDEX`` names
(issue 31): built, appended to from the change log, equal to the in-memory search."""

from __future__ import annotations

import pytest
from index_fixtures import ENCODER_ID, add_images, stand_in

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.audit.config import AuditConfig
from chexretrieve.index import INDEX_ENV, IndexConfig, index_folder, read_manifest
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest
from chexretrieve.store import open_store


def config(tmp_path, enabled: bool) -> AppConfig:
    return AppConfig(
        encoder="stand-in:0:32",
        search=SearchConfig(feature_cache_dir=tmp_path / "features"),
        audit=AuditConfig(enabled=False),
        index=IndexConfig(enabled=enabled, feature_dtype="float32", density=False),
    )


@pytest.mark.slow
def test_a_postgresql_store_is_indexed_in_the_configured_folder(
    postgres_url, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(INDEX_ENV, str(tmp_path / "shared-index"))
    store = open_store(postgres_url)
    try:
        add_images(store, 0, 800)
        app = open_search_app(config(tmp_path, True), store=store, encoder=stand_in())
        memory = open_search_app(config(tmp_path, False), store=store, encoder=stand_in())
        folder = index_folder(store, ENCODER_ID, IndexConfig())
        assert folder.is_relative_to(tmp_path / "shared-index")
        assert read_manifest(folder).rows == 800
        for geometry in ("softmax", "cosine"):
            request = SearchRequest(finding="Edema", geometry=geometry, case_id=17, top_k=20)
            got, want = app.service.search(request), memory.service.search(request)
            assert [(h.image_id, h.score) for h in got.hits] == [
                (h.image_id, h.score) for h in want.hits
            ]
        old = read_manifest(folder)
        add_images(store, 800, 120)
        current = store.labels_frame([5]).reindex([5])["Edema"].iloc[0]
        assert store.set_labels(5, {"Edema": 0.0 if current == 1.0 else 1.0})
        from chexretrieve.app.index_commands import build_index

        manifest = build_index(store, stand_in(), config(tmp_path, True))
        assert manifest.rows == 920
        assert manifest.file("embeddings").file == old.file("embeddings").file  # appended
        assert manifest.file("labels").file != old.file("labels").file  # rewritten
        result = app.service.search(SearchRequest(finding="Edema", geometry="softmax",
                                                  case_id=900, top_k=5))  # fmt: skip
        assert result.candidates == 918  # 920 less the query's study (two images)
    finally:
        store.close()
