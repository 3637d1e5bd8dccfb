"""Headline spreads over world seeds x encoders, per-query AP against scikit-learn through the
evaluation's own scoring path (exact ties), and the first run's announcement."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from eval_fakes import ProjectionGeometry, projection_fitter, toy_world
from sklearn.metrics import average_precision_score

from chexretrieve.evaluation.config import RetrievalEvalConfig
from chexretrieve.evaluation.protocol import finding_task
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.scoring import task_average_precision
from chexretrieve.evaluation.spread import spread_cells, spread_markdown_frame, spread_summary

CONFIG = RetrievalEvalConfig(findings=("Pleural Effusion", "Cardiomegaly"),
                             geometries=("cosine", "softmax"))  # fmt: skip


def _two_encoder_run(seed: int):
    archive, view = toy_world(seed)
    rng = np.random.default_rng(seed + 50)
    noisy = view.embeddings + rng.normal(scale=0.3, size=view.embeddings.shape)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    other = replace(view, encoder_id="toy:1", embeddings=noisy.astype(np.float32))
    return run_retrieval(
        archive, [view, other], CONFIG, fitter=projection_fitter, show_progress=False
    )


def test_spread_cells_are_each_encoders_average_over_findings():
    run = _two_encoder_run(0)
    cells = spread_cells(run, 0, [("softmax", "cosine")])
    pq = run.per_query
    for checkpoint in ("toy:0", "toy:1"):
        part = pq[pq["checkpoint"] == checkpoint]
        means = part.groupby(["finding", "geometry"])["ap"].mean().unstack()
        expected = float((means["softmax"] - means["cosine"]).mean())
        got = cells.query("checkpoint == @checkpoint and reference == 'cosine'")["value"]
        assert got.item() == pytest.approx(expected, abs=1e-12)
        # the paired difference of means equals the mean of paired per-query differences
        wide = part.pivot_table(index=["finding", "variant", "query"], columns="geometry",
                                values="ap")  # fmt: skip
        per_finding = (wide["softmax"] - wide["cosine"]).groupby(level="finding").mean()
        assert per_finding.mean() == pytest.approx(expected, abs=1e-12)
        auprc = cells.query(
            "checkpoint == @checkpoint and geometry == 'cosine' and reference == ''"
        )
        assert auprc["value"].item() == pytest.approx(float(means["cosine"].mean()))


def test_spread_summary_over_worlds_and_encoders():
    cells = pd.concat(
        [spread_cells(_two_encoder_run(seed), seed, [("softmax", "cosine")]) for seed in (0, 1, 2)]
    )
    summary = spread_summary(cells).set_index(["geometry", "reference"])
    row = summary.loc[("softmax", "cosine")]
    values = cells.query("reference == 'cosine'")["value"]
    assert row["n_cells"] == 6 and row["n_worlds"] == 3 and row["n_encoders"] == 2
    assert row["mean"] == pytest.approx(values.mean())
    assert row["min"] == values.min() and row["max"] == values.max()
    assert row["sd"] == pytest.approx(values.std(ddof=1))
    assert row["cells_above_0"] == int((values > 0).sum())
    shown = spread_markdown_frame(spread_summary(cells), str)
    assert shown.loc["softmax − cosine", "worlds x encoders"] == "3 x 2"
    assert shown.loc["softmax − cosine", "mean [min, max]"].startswith(f"{row['mean']:+.3f} [")


def test_spread_seeds_need_the_phantom_source(tmp_path):
    from typer.testing import CliRunner

    from chexretrieve.cli import app

    result = CliRunner().invoke(
        app, ["eval", "retrieval", "--db", "sqlite:///x.db", "--spread-seeds", "5", "--out",
              str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code != 0 and "--spread-seeds needs the phantom source" in result.output
    result = CliRunner().invoke(
        app, ["eval", "retrieval", "--spread-seeds", "5,0", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code != 0 and "repeats a world" in result.output
    assert not (tmp_path / "r").exists()


class RoundedGeometry(ProjectionGeometry):
    """Cosine rounded to one decimal: many keys share a score (exact ties)."""

    def score(self, fq, fk):
        return np.round(super().score(fq, fk), 1)


@pytest.mark.parametrize("block", [4_000_000, 50])
def test_per_query_ap_equals_scikit_learn_at_exact_ties(block):
    """The evaluation's scoring path (features, blocked scores, relevance, AP) gives every query
    scikit-learn's average_precision_score of the same scores, ties included."""
    archive, view = toy_world(3)
    task = finding_task(archive, "Pleural Effusion", CONFIG.protocol)
    geometry = RoundedGeometry(None)
    (ap,) = task_average_precision(geometry, view.embeddings, [task], max_block_elements=block)
    scores = geometry.score(
        geometry.features(view.embeddings[task.query_index]),
        geometry.features(view.embeddings[task.key_index]),
    )
    n_tied = [len(row) - len(np.unique(row)) for row in scores]
    assert min(n_tied) > 10  # the test is about ties
    expected = [average_precision_score(task.key_class, row) for row in scores]
    np.testing.assert_allclose(ap, expected, rtol=0, atol=1e-12)


def test_the_first_run_says_once_what_it_computes(tmp_path, monkeypatch, capsys):
    import chexretrieve.encoders as encoders
    from chexretrieve.evaluation import progress
    from chexretrieve.evaluation.config import PhantomSourceConfig
    from chexretrieve.evaluation.phantom_source import phantom_source
    from chexretrieve.evaluation.sources import AnchorTexts

    class Pixels:
        encoder_id, inv_temperature = "stand-in:announce", 20.0

        def embed_images(self, images):
            return np.ones((len(images), 4), np.float32) / 2

        def embed_texts(self, texts):
            return np.ones((len(texts), 4), np.float32) / 2

    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: Pixels())
    monkeypatch.setattr(progress, "_ANNOUNCED", set())
    texts = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})
    config = PhantomSourceConfig(n_images=3, seed=7, cache_dir=str(tmp_path), workers=1)
    phantom_source(config, texts, show_progress=True)
    first = capsys.readouterr().err
    assert first.count("Generating phantom world 7 (3 images)") == 1
    assert "read from the cache" in first and "several times faster" in first
    phantom_source(config, texts, show_progress=True)  # cached: nothing to announce
    assert "Generating phantom world" not in capsys.readouterr().err
