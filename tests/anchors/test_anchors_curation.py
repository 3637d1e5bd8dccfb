"""embed (cached per set version and encoder in the store) and impact (AUPRC before/after)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from anchors_testing import EFFUSION, effusion_set
from sklearn.metrics import average_precision_score
from typer.testing import CliRunner

from chexretrieve.anchors import AnchorSetError, save_new_version
from chexretrieve.anchors import curation as curation_module
from chexretrieve.anchors.config import ImpactConfig
from chexretrieve.anchors.curation import embed_anchor_set, measure_impact
from chexretrieve.geometry import fit_geometry

DIM = 16


class BagOfWordsEncoder:
    """Deterministic text tower: a fixed random vector per word, sentence = normalised sum."""

    encoder_id = "fake:bow"
    inv_temperature = 20.0
    embed_dim = DIM

    def __init__(self):
        self.calls = 0

    @staticmethod
    def word(word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little")
        return np.random.default_rng(seed).standard_normal(DIM)

    def embed_texts(self, texts):
        self.calls += 1
        rows = [sum(self.word(w) for w in t.lower().strip(".").split()) for t in texts]
        rows = np.asarray(rows, dtype=np.float64)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def store(tmp_path):
    from chexretrieve.store import open_store

    opened = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    yield opened
    opened.close()


def _images(n: int, seed: int):
    """Unit image vectors and Pleural Effusion labels: positives lean towards 'effusion'."""
    rng = np.random.default_rng(seed)
    labels = rng.choice([1.0, 0.0, -1.0, np.nan], size=n, p=[0.4, 0.4, 0.1, 0.1])
    direction = BagOfWordsEncoder.word("effusion")
    vectors = rng.standard_normal((n, DIM)) + np.where(labels == 1, 1.5, 0.0)[:, None] * direction
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), labels


def test_embed_caches_per_version_content_and_encoder(store) -> None:
    encoder = BagOfWordsEncoder()
    first = embed_anchor_set(effusion_set(), encoder, store)
    assert not first.cached and first.matrix.shape == (len(EFFUSION), DIM)
    again = embed_anchor_set(effusion_set(), encoder, store)
    assert again.cached and encoder.calls == 1
    np.testing.assert_array_equal(again.matrix, first.matrix)
    edited = effusion_set().revised(sentences=EFFUSION[:-1])
    assert not embed_anchor_set(edited, encoder, store).cached and encoder.calls == 2
    assert not embed_anchor_set(effusion_set(), encoder, store, refresh=True).cached
    frame = store.anchor_embeddings_frame()
    assert sorted(frame["version"].astype(str)) == ["1", "2"]
    # without a store nothing is cached
    assert not embed_anchor_set(effusion_set(), encoder).cached


def test_embed_rejects_an_encoder_that_loses_sentences() -> None:
    class Broken(BagOfWordsEncoder):
        def embed_texts(self, texts):
            return super().embed_texts(texts)[:-1]

    with pytest.raises(AnchorSetError, match="returned 5 vectors for 6 sentences"):
        embed_anchor_set(effusion_set(), Broken())


def _naive_auprc(anchor_set, encoder, keys, key_labels, queries, query_labels) -> float:
    geometry = fit_geometry("softmax", encoder.embed_texts(anchor_set.sentences), 20.0)
    key_rows = key_labels != -1
    scores = geometry.similarity(queries[query_labels == 1], keys[key_rows])
    relevant = key_labels[key_rows] == 1
    return float(np.mean([average_precision_score(relevant, row) for row in scores]))


def test_impact_matches_a_naive_reference_and_lists_changed_queries(monkeypatch) -> None:
    monkeypatch.setattr(curation_module, "QUERY_CHUNK", 7)  # several chunks
    encoder = BagOfWordsEncoder()
    keys, key_labels = _images(120, seed=1)
    queries, query_labels = _images(40, seed=2)
    before = effusion_set()
    after = before.revised(sentences=[(t, p) for t, p in EFFUSION if "effusion" not in t.lower()])
    report = measure_impact(
        before,
        after,
        encoder,
        keys,
        key_labels,
        queries,
        query_labels,
        ImpactConfig(top_k=5, show_queries=3),
        key_ids=[f"k{i}" for i in range(120)],
    )
    assert report.n_queries == int((query_labels == 1).sum())
    assert report.n_keys == int((key_labels != -1).sum())
    assert report.n_relevant_keys == int((key_labels == 1).sum())
    for name, anchor_set in (("auprc_before", before), ("auprc_after", after)):
        expected = _naive_auprc(anchor_set, encoder, keys, key_labels, queries, query_labels)
        assert getattr(report, name) == pytest.approx(expected, abs=1e-9)
    cosine = fit_geometry("cosine", None).similarity(
        queries[query_labels == 1], keys[key_labels != -1]
    )
    relevant = key_labels[key_labels != -1] == 1
    expected_cosine = np.mean([average_precision_score(relevant, row) for row in cosine])
    assert report.auprc_cosine == pytest.approx(expected_cosine, abs=1e-9)
    # dropping every sentence that names the finding should hurt retrieval here
    assert report.delta < 0
    assert len(report.most_changed) == 3
    overlaps = [c.overlap for c in report.most_changed]
    assert overlaps == sorted(overlaps) and overlaps[0] < 1.0
    change = report.most_changed[0]
    assert len(change.top_before) == 5 and all(k.startswith("k") for k in change.top_after)
    assert 0.0 <= report.mean_overlap <= 1.0
    assert report.to_dict()["delta"] == pytest.approx(report.delta)


def test_impact_of_no_edit_is_nothing() -> None:
    keys, key_labels = _images(60, seed=3)
    queries, query_labels = _images(20, seed=4)
    report = measure_impact(
        effusion_set(), effusion_set(), BagOfWordsEncoder(), keys, key_labels, queries, query_labels
    )
    assert report.delta == 0.0 and report.mean_overlap == 1.0
    assert all(c.top_before == c.top_after for c in report.most_changed)


def test_impact_refuses_mismatched_sets_and_missing_labels() -> None:
    from anchors_testing import SOURCE

    from chexretrieve.anchors import AnchorSet

    keys, key_labels = _images(30, seed=5)
    other = AnchorSet.create(sentences=EFFUSION, source=SOURCE, finding="Edema", variant="a")
    with pytest.raises(AnchorSetError, match="one finding's set"):
        measure_impact(
            effusion_set(), other, BagOfWordsEncoder(), keys, key_labels, keys, key_labels
        )
    with pytest.raises(ValueError, match="no usable labels"):
        measure_impact(
            effusion_set(),
            effusion_set(),
            BagOfWordsEncoder(),
            keys,
            key_labels,
            keys,
            np.zeros(30),
        )
    with pytest.raises(ValueError, match="one label per embedding row"):
        measure_impact(
            effusion_set(),
            effusion_set(),
            BagOfWordsEncoder(),
            keys,
            key_labels[:-1],
            keys,
            key_labels,
        )


def _fill_store(store, encoder) -> None:
    from chexretrieve.store import ImageRecord

    store.register_encoder(encoder.encoder_id, DIM, encoder.inv_temperature)
    for split, (vectors, labels) in (("train", _images(50, 6)), ("valid", _images(20, 7))):
        for i, (vector, label) in enumerate(zip(vectors, labels, strict=True)):
            record = ImageRecord(
                sop_uid=f"1.2.{split}.{i}",
                study_uid=f"1.3.{split}.{i}",
                pixel_sha256=f"{split}{i}",
                split=split,
            )
            value = None if np.isnan(label) else float(label)
            store.add_image_with_embedding(
                record, vector, encoder.encoder_id, labels={"Pleural Effusion": value}
            )


def test_cli_embed_and_impact_with_a_real_store(tmp_path, store, monkeypatch) -> None:
    from chexretrieve.anchors import commands
    from chexretrieve.cli import app

    encoder = BagOfWordsEncoder()
    _fill_store(store, encoder)
    monkeypatch.setattr(commands, "_open_store_and_encoder", lambda db, spec: (store, encoder))
    root = tmp_path / "anchors"
    save_new_version(effusion_set(), root)
    save_new_version(effusion_set().revised(sentences=EFFUSION[:4]), root)
    runner = CliRunner()
    result = runner.invoke(app, ["anchors", "embed", "--root", str(root)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "pleural_effusion.a@2" in result.output and "stored" in result.output
    assert "pleural_effusion.a@1" not in result.output  # newest version only
    result = runner.invoke(
        app,
        [
            "anchors",
            "impact",
            "pleural_effusion.a@1",
            "pleural_effusion.a@2",
            "--root",
            str(root),
            "--top-k",
            "5",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output)
    assert data["before"] == "pleural_effusion.a@1" and data["after"] == "pleural_effusion.a@2"
    assert data["n_queries"] > 0 and len(data["most_changed"][0]["top_before"]) == 5
    assert data["delta_low"] <= data["delta"] <= data["delta_high"]  # its 95 % interval
    shown = runner.invoke(
        app,
        ["anchors", "impact", "pleural_effusion.a@1", "pleural_effusion.a@2", "--root",
         str(root), "--top-k", "5"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert shown.exit_code == 0 and "95 % interval" in shown.output
    result = runner.invoke(
        app,
        [
            "anchors",
            "impact",
            "pleural_effusion.a@1",
            "pleural_effusion.a@2",
            "--root",
            str(root),
            "--query-split",
            "test",
        ],
    )
    assert result.exit_code == 2 and "0 'test' images" in result.output
