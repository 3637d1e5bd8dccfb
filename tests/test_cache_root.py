"""One cache root for search features and the evaluation's caches; cache files are written under a
unique temporary name and renamed, so no reader or concurrent writer sees half a file."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from chexretrieve.cache import cache_root, temporary_name, write_atomically
from chexretrieve.evaluation.sources import EmbeddingCache
from chexretrieve.search.features import default_cache_folder
from chexretrieve.search.service import SearchService


def test_cache_root_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("CHEXRETRIEVE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "chexretrieve"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "chexretrieve"
    monkeypatch.setenv("CHEXRETRIEVE_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    assert default_cache_folder() == tmp_path / "mine" / "features"


def test_search_and_evaluation_caches_share_the_root(tmp_path, monkeypatch):
    import chexretrieve.encoders as encoders
    from chexretrieve.evaluation.config import PhantomSourceConfig
    from chexretrieve.evaluation.phantom_source import phantom_source
    from chexretrieve.evaluation.sources import AnchorTexts

    class Pixels:
        encoder_id = "pixels:16"
        inv_temperature = 10.0

        def embed_images(self, images):
            x = np.stack([np.resize(np.asarray(i, np.float64).ravel(), 16) for i in images]) + 1
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        def embed_texts(self, texts):
            x = np.stack([np.resize(np.frombuffer(t.encode() * 4, np.uint8), 16) for t in texts])
            x = x.astype(np.float64) + 1.0
            return x / np.linalg.norm(x, axis=1, keepdims=True)

    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: Pixels())
    monkeypatch.setenv("CHEXRETRIEVE_CACHE", str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path)
    texts = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})
    phantom_source(PhantomSourceConfig(n_images=4, workers=1), texts, show_progress=False)
    written = sorted(p.suffix for p in (tmp_path / "root" / "eval").iterdir())
    assert written == [".csv", ".npy", ".npy"]  # labels, image and anchor embeddings
    assert not (tmp_path / ".cache").exists()  # no longer a folder in the working directory
    service = SearchService(lambda: None, anchors=None)
    assert service.cache.folder == tmp_path / "root" / "features"


def test_a_failed_write_leaves_neither_a_partial_entry_nor_its_temporary(tmp_path):
    cache = EmbeddingCache(tmp_path)
    cache.put("k", np.arange(6, dtype=np.float32).reshape(2, 3))

    def half_then_fail(tmp: Path) -> None:
        tmp.write_bytes(b"\x93NUMPY half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(tmp_path / "k.npy", half_then_fail)
    assert [p.name for p in tmp_path.iterdir()] == ["k.npy"]
    np.testing.assert_array_equal(cache.get("k"), np.arange(6).reshape(2, 3))


def test_concurrent_writers_of_one_entry_use_their_own_temporaries(tmp_path):
    names: list[Path] = []
    arrays = [np.full((200, 64), i, dtype=np.float32) for i in range(8)]
    cache = EmbeddingCache(tmp_path)
    barrier = threading.Barrier(len(arrays))

    def writer(i: int) -> None:
        names.append(temporary_name(tmp_path / "k.npy"))
        barrier.wait(timeout=60)  # hang guard only
        cache.put("k", arrays[i])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(set(names)) == len(arrays)
    final = cache.get("k")
    assert final.shape == (200, 64) and len(np.unique(final)) == 1  # one writer's whole array
    assert [p.name for p in tmp_path.iterdir()] == ["k.npy"]
