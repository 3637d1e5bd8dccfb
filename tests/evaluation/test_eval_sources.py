"""Sources end to end: a tiny CheXpert-layout folder with tiny random CheXzero checkpoints
(CLI), the natural-image protocol with a tiny Hugging Face CLIP, the phantom source with a
stand-in encoder, and the real geometries on the toy world."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from eval_fakes import toy_world
from eval_fixtures import (
    write_anchor_root,
    write_chexpert_folder,
    write_chexzero,
    write_natural_folder,
    write_tiny_hf_clip,
)
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.evaluation.config import IntervalConfig, RetrievalEvalConfig
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.sources import load_anchor_texts, read_chexpert_folder
from chexretrieve.evaluation.summaries import difference_table

runner = CliRunner()


def test_read_chexpert_folder_resolves_paths_and_labels(tmp_path):
    root = write_chexpert_folder(tmp_path)
    archive, paths = read_chexpert_folder(root)
    assert len(archive) == 34 and all(p.is_file() for p in paths)
    assert set(archive.splits) == {"train", "valid"}
    assert archive.labels.loc[5, "Pleural Effusion"] == -1
    assert "AP/PA" in archive.labels.columns
    small, _ = read_chexpert_folder(root, max_images_per_split=5)
    assert len(small) == 10
    (root / "valid.csv").unlink()
    with pytest.raises(ValueError, match="valid.csv"):
        read_chexpert_folder(root)


def test_anchor_texts_from_files(tmp_path):
    root = write_anchor_root(tmp_path / "anchors")
    texts = load_anchor_texts(root, ("Pleural Effusion", "Cardiomegaly"))
    assert [v for v, _ in texts.findings["Pleural Effusion"]] == ["a", "b"]
    assert len(texts.broad) == 16
    assert list(texts.nuisance) == ["nuisance/projection-habitus"]


def test_cli_chexpert_two_checkpoints(tmp_path):
    root = write_chexpert_folder(tmp_path / "data", laterals=3)
    checkpoints, tokenizer = write_chexzero(tmp_path / "models", seeds=(0, 1))
    anchors = write_anchor_root(tmp_path / "anchors")
    out = tmp_path / "report"
    args = ["eval", "retrieval", "--chexpert-root", str(root), "--tokenizer", str(tokenizer)]
    for ckpt in checkpoints:
        args += ["--checkpoint", str(ckpt)]
    args += [
        "--anchors-root", str(anchors), "--findings", "pleural effusion,cardiomegaly",
        "--geometries", "cosine,iti,softmax,gaussian,posterior_latent_spherical",
        "--experiments", "mixing,budget", "--mixing-weights", "0,1", "--budget-counts", "2,4",
        "--curve-geometries", "softmax,gaussian", "--repeats", "1", "--bootstrap", "50",
        "--cache-dir", str(tmp_path / "cache"),
        "--device", "cpu", "--out", str(out), "--quiet", "--min-queries", "2",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Table 2" in result.output and "Effusion" in result.output
    table2 = pd.read_csv(out / "tables" / "table2.csv", index_col=0)
    # frontal only (the default): valid rows 0, 3, 6, 9, not the lateral of patient 64541
    assert table2.loc["Pleural Effusion", "n queries"] == 4
    queries = pd.read_csv(out / "queries.csv")
    effusion = queries[queries["finding"] == "Pleural Effusion"]
    assert effusion["image"].tolist() == [
        f"CheXpert-v1.0-small/valid/patient{64541 + i}/study1/view1_frontal.{ext}"
        for i, ext in ((0, "png"), (3, "jpg"), (6, "png"), (9, "jpg"))
    ]
    assert effusion["patient"].tolist() == [f"patient{64541 + i}" for i in (0, 3, 6, 9)]
    assert set(effusion["view"]) == {"frontal"}
    keys = pd.read_csv(out / "keys.csv")
    assert len(keys) == 24 and not keys["image"].str.contains("lateral").any()
    by_image = keys.set_index("image")
    uncertain = "CheXpert-v1.0-small/train/patient00005/study1/view1_frontal.jpg"
    assert np.isnan(by_image.loc[uncertain, "Pleural Effusion"])  # dropped: not a key
    assert by_image.loc[uncertain, "Cardiomegaly"] == 1.0  # 5 % 4 == 1: relevant
    md = (out / "report.md").read_text()
    assert "Views: frontal images only (`views=frontal`, as CheXzero evaluates" in md
    assert "6 lateral" in md and "6 images of other or unknown views were left out" in md
    assert "the query and key splits share no patient (checked)" in md
    assert "cluster bootstrap" in md
    per_query = pd.read_csv(out / "per_query_ap.csv.gz")
    assert per_query["checkpoint"].nunique() == 2 and per_query["variant"].nunique() == 2
    assert per_query["image"].str.startswith("CheXpert-v1.0-small/valid/patient").all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert "fig3_mixing.png" in manifest["figures"] and "fig4_budget.png" in manifest["figures"]
    assert len(list((tmp_path / "cache").glob("images-*.npy"))) == 2
    # every view (embeddings cached): the lateral of valid patient 0 queries too
    every = tmp_path / "every"
    at = args.index("--out")
    again = args[: at + 1] + [str(every)] + args[at + 2 :] + ["--views", "all"]
    result = runner.invoke(app, again)
    assert result.exit_code == 0, result.output
    table2 = pd.read_csv(every / "tables" / "table2.csv", index_col=0)
    assert table2.loc["Pleural Effusion", "n queries"] == 5
    assert "Views: all (`views=all`" in (every / "report.md").read_text()
    # the deprecated alias still works, with a warning; a contradiction is refused
    result = runner.invoke(app, [*args[: at + 1], str(tmp_path / "alias"), *args[at + 2 :],
                                 "--frontal-only", "--experiments", "none"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--frontal-only is deprecated" in result.output
    fresh = [*args[: at + 1], str(tmp_path / "contradiction"), *args[at + 2 :]]
    result = runner.invoke(app, [*fresh, "--frontal-only", "--views", "all"])
    assert result.exit_code != 0 and "contradicts --views all" in result.output
    # a report folder is never overwritten: the same --out again is refused before any work
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "never overwritten" in result.output


def test_cli_refuses_a_leaking_chexpert_split_before_embedding(tmp_path):
    root = write_chexpert_folder(tmp_path / "data", shared_patients=3)
    args = [
        "eval", "retrieval", "--chexpert-root", str(root), "--checkpoint",
        str(tmp_path / "never-loaded.pt"), "--anchors-root",
        str(write_anchor_root(tmp_path / "anchors")), "--out", str(tmp_path / "r"), "--quiet",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "3 patients have images in both the query split 'valid' and the key split" in (
        " ".join(result.output.split())
    )
    assert "patient00000, patient00001, patient00002" in result.output
    assert not (tmp_path / "r").exists()


def test_embedding_cache_skips_a_second_pass(tmp_path):
    from chexretrieve.evaluation.sources import EmbeddingCache, embed_image_files

    root = write_chexpert_folder(tmp_path, n_train=3, n_valid=2)
    _, paths = read_chexpert_folder(root)

    from chexretrieve.evaluation.cache_keys import probe_images

    probe_shape = probe_images()[0].shape

    class Counting:
        encoder_id, calls = "count:1", 0

        def embed_images(self, images):  # counts the files, not the cache key's probe images
            Counting.calls += sum(np.shape(im) != probe_shape for im in images)
            return np.ones((len(images), 4), np.float32) / 2

    cache = EmbeddingCache(tmp_path / "cache")
    first = embed_image_files(Counting(), paths, cache, batch_size=2, show_progress=False)
    second = embed_image_files(Counting(), paths, cache, batch_size=2, show_progress=False)
    assert Counting.calls == 5 and first.shape == (5, 4)
    np.testing.assert_array_equal(first, second)
    paths[0].touch()  # a changed file invalidates the cache
    embed_image_files(Counting(), paths, cache, show_progress=False)
    assert Counting.calls == 10


def test_cli_bad_source_messages(tmp_path):
    result = runner.invoke(
        app, ["eval", "retrieval", "--db", "sqlite:///x.db", "--chexpert-root", str(tmp_path)]
    )
    assert result.exit_code != 0 and "either --db or --chexpert-root" in result.output
    result = runner.invoke(app, ["eval", "retrieval", "--findings", "Pleural Thing"])
    assert result.exit_code != 0 and "unknown finding" in result.output


def test_cli_natural_images(tmp_path):
    images = write_natural_folder(tmp_path / "images")
    model = write_tiny_hf_clip(tmp_path / "clip")
    out = tmp_path / "natural"
    result = runner.invoke(
        app,
        [
            "eval", "natural", str(images), "--model", str(model), "--geometries",
            "cosine,softmax,gaussian", "--weights", "0,1", "--bootstrap", "50", "--device", "cpu",
            "--out", str(out), "--quiet",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "tables" / "natural_auprc.csv")
    assert set(table["coordinate"]) == {"class", "style"}
    assert table["n_queries"].iloc[0] == 12
    assert "fig3_mixing.png" in json.loads((out / "manifest.json").read_text())["figures"]
    assert "Images were embedded in colour." in (out / "report.md").read_text()  # hf-clip: RGB


def test_real_geometries_favour_the_finding_on_the_toy_world():
    archive, view = toy_world()
    config = RetrievalEvalConfig(
        findings=("Pleural Effusion",),
        geometries=("cosine", "iti", "softmax", "gaussian", "latent_spherical", "movmf"),
        intervals=IntervalConfig(n_bootstrap=100),
        inv_temperature=10.0,
    )
    run = run_retrieval(archive, [view], config, show_progress=False)
    diffs = difference_table(
        run, [(g, "cosine") for g in ("softmax", "gaussian", "latent_spherical", "movmf")],
        config.intervals,
    )  # fmt: skip
    assert (diffs["low"] > 0.1).all(), diffs


def test_phantom_source_with_a_stand_in_encoder(tmp_path, monkeypatch):
    import chexretrieve.encoders as encoders
    from chexretrieve.evaluation.config import PhantomSourceConfig
    from chexretrieve.evaluation.phantom_source import phantom_source
    from chexretrieve.evaluation.sources import AnchorTexts

    class Pixels:
        encoder_id, inv_temperature = "stand-in:1", 50.0

        def embed_images(self, images):
            x = np.stack([np.resize(im[::40, ::40].ravel(), 16) for im in images]) + 1e-3
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        def embed_texts(self, texts):
            x = np.stack(
                [np.resize(np.frombuffer(t.encode() * 4, np.uint8)[:16], 16) for t in texts]
            )
            x = x.astype(np.float64) + 1.0
            return x / np.linalg.norm(x, axis=1, keepdims=True)

    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: Pixels())
    texts = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})
    config = PhantomSourceConfig(n_images=6, cache_dir=str(tmp_path), workers=1)
    archive, (view,) = phantom_source(config, texts, show_progress=False)
    assert len(archive) == 6 and view.embeddings.shape == (6, 16)
    assert {"AP/PA", "Sex", "truth: Pleural Effusion"} <= set(archive.labels.columns)
    assert set(archive.splits) <= {"train", "valid"}
    again, _ = phantom_source(config, texts, show_progress=False)  # from the cache
    np.testing.assert_array_equal(again.image_ids, archive.image_ids)


def test_store_source_reads_labels_splits_and_embeddings(tmp_path, monkeypatch):
    import chexretrieve.encoders as encoders
    from chexretrieve.evaluation.sources import AnchorTexts, store_source
    from chexretrieve.store import ImageRecord, open_store

    archive, view = toy_world(n_train=12, n_valid=4, dim=8)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    store.register_encoder("toy:0", 8, 100.0)
    for i in range(len(archive)):
        record = ImageRecord(
            sop_uid=f"1.2.3.{i}",
            study_uid=f"1.2.4.{i}",
            pixel_sha256=f"{i:064x}",
            view_position=str(archive.labels["projection"][i]),
            split=str(archive.splits[i]),
        )
        labels = {"Pleural Effusion": archive.labels["Pleural Effusion"][i]}
        store.add_image_with_embedding(record, view.embeddings[i], "toy:0", labels=labels)
    store.close()

    class Toy:
        encoder_id, inv_temperature = "toy:0", 100.0

        def embed_texts(self, texts):
            return np.tile(view.embeddings[:1], (len(texts), 1))

    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: Toy())
    texts = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})
    got, (got_view,) = store_source(url, ["toy"], texts)
    assert len(got) == 16 and list(got.splits) == list(archive.splits)
    np.testing.assert_allclose(got_view.embeddings, view.embeddings, atol=1e-7)
    np.testing.assert_array_equal(
        got.labels["Pleural Effusion"].to_numpy(), archive.labels["Pleural Effusion"].to_numpy()
    )
    assert list(got.labels["view_position"]) == list(archive.labels["projection"])
