"""Experiments and the report folder on the toy world (stand-in geometry)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import pytest
from eval_fakes import projection_fitter, toy_world

from chexretrieve.evaluation.config import (
    BudgetConfig,
    IntervalConfig,
    MixingConfig,
    PosteriorConfig,
    ProtocolConfig,
    RetrievalEvalConfig,
    RuntimeConfig,
)
from chexretrieve.evaluation.experiments import (
    budget_experiment,
    mix_anchors,
    mixing_experiment,
    posterior_experiment,
)
from chexretrieve.evaluation.report import EvaluationReport, write_report
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.runtime import runtime_table, time_retrieval
from chexretrieve.evaluation.summaries import (
    auprc_table,
    difference_table,
    table2_pairs,
    table3_pairs,
)

FAST = IntervalConfig(n_bootstrap=100, seed=0)
PROTOCOL = ProtocolConfig()


def test_mix_anchors_weights():
    a, b = np.eye(4)[:2], np.eye(4)[2:]
    anchors, weights = mix_anchors(a, b, 0.25)
    assert anchors.shape == (4, 4)
    np.testing.assert_allclose(weights, [0.125, 0.125, 0.375, 0.375])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        mix_anchors(a, b, 1.5)


def test_mixing_moves_retrieval_between_coordinates():
    archive, view = toy_world()
    config = MixingConfig(
        weights=(0.0, 1.0),
        findings=("Pleural Effusion",),
        nuisance="projection",
        nuisance_label="projection",
    )
    frame = mixing_experiment(
        archive, [view], config, PROTOCOL, FAST, fitter=projection_fitter, show_progress=False
    )
    get = frame.set_index(["coordinate", "p"])["mean"]
    # finding anchors (p = 1) favour the finding; nuisance anchors (p = 0) favour the view
    assert get[("Pleural Effusion", 1.0)] > get[("Pleural Effusion", 0.0)] + 0.1
    assert get[("projection (nuisance)", 0.0)] > get[("projection (nuisance)", 1.0)] + 0.1
    with pytest.raises(ValueError, match="no nuisance anchor set 'habitus'"):
        mixing_experiment(
            archive,
            [view],
            MixingConfig(nuisance="habitus"),
            PROTOCOL,
            FAST,
            fitter=projection_fitter,
            show_progress=False,
        )


def test_budget_and_posterior_curves():
    archive, view = toy_world()
    findings = ("Pleural Effusion", "Cardiomegaly")
    budget = budget_experiment(
        archive,
        [view],
        BudgetConfig(anchor_counts=(2, 4, 32), repeats=2, geometries=("softmax", "gaussian")),
        PROTOCOL,
        FAST,
        findings,
        fitter=projection_fitter,
        show_progress=False,
    )
    # 32 exceeds the pooled 18 anchors: the curve ends at all 18
    assert sorted(set(budget["n_anchors"])) == [2, 4, 18]
    assert {"cosine", "softmax", "gaussian"} == set(budget["geometry"])
    assert set(budget["finding"]) == {*findings, "Average"}
    posterior = posterior_experiment(
        archive,
        [view],
        PosteriorConfig(target_counts=(2, 4), repeats=2, geometries=("softmax", "gmm")),
        PROTOCOL,
        FAST,
        findings,
        fitter=projection_fitter,
        show_progress=False,
    )
    assert "posterior_gmm" in set(posterior["geometry"])
    assert "posterior_softmax" not in set(posterior["geometry"])


def test_runtime_rows():
    config = RuntimeConfig(
        n_queries=20,
        n_gallery=50,
        dim=8,
        anchor_counts=(4, 16),
        geometries=("cosine", "softmax"),
        repeats=2,
        warmup=1,
        device="cpu",
    )
    ticks = iter(np.arange(0, 100, 0.5))
    frame = time_retrieval(
        config, fitter=projection_fitter, show_progress=False, clock=lambda: float(next(ticks))
    )
    assert len(frame) == 4 and (frame["mean_s"] == 0.5).all()
    assert runtime_table(frame).shape == (2, 2)


def test_report_folder(tmp_path):
    archive, view = toy_world()
    config = RetrievalEvalConfig(
        findings=("Pleural Effusion", "Cardiomegaly"),
        geometries=("cosine", "iti", "softmax", "gaussian"),
        intervals=FAST,
    )
    run = run_retrieval(archive, [view], config, fitter=projection_fitter, show_progress=False)
    pairs = table2_pairs(run) + table3_pairs(run)
    mixing = pd.DataFrame(
        {
            "finding": ["Pleural Effusion"] * 4,
            "p": [0.0, 1.0, 0.0, 1.0],
            "coordinate": ["Pleural Effusion"] * 2 + ["view"] * 2,
            "mean": [0.3, 0.6, 0.8, 0.5],
            "low": [0.2, 0.5, 0.7, 0.4],
            "high": [0.4, 0.7, 0.9, 0.6],
        }
    )
    report = EvaluationReport(
        title="toy report",
        command="chexretrieve eval retrieval --toy",
        source="toy world",
        run=run,
        auprc=auprc_table(run, FAST),
        differences=difference_table(run, list(dict.fromkeys(pairs)), FAST),
        mixing=mixing,
        settings={"retrieval": config},
    )
    paths = write_report(report, tmp_path / "out")
    md = paths["markdown"].read_text()
    assert "Table 2" in md and "Softmax − Cosine" in md and "Softmax − ITI" in md
    assert "Table 3" in md and "Gaussian" in md and "n queries" in md
    html = paths["html"].read_text()
    assert html.count("data:image/png;base64,") == len(list(paths["figures"].glob("*.png"))) >= 4
    first = html.split("data:image/png;base64,")[1].split("'")[0]
    assert base64.b64decode(first)[:8] == b"\x89PNG\r\n\x1a\n"
    table2 = pd.read_csv(paths["tables"] / "table2.csv", index_col=0)
    assert "Average" in table2.index and "n keys" in table2.columns
    manifest = json.loads(paths["manifest"].read_text())
    assert manifest["settings"]["retrieval"]["intervals"]["n_bootstrap"] == 100
    per_query = pd.read_csv(tmp_path / "out" / "per_query_ap.csv.gz")
    assert len(per_query) == len(run.per_query)


def test_curve_points_a_geometry_rejects_are_dropped_with_a_note():
    archive, view = toy_world()

    def picky(kind, anchors, inv_temperature=100.0, prior=None, **options):
        if kind == "gaussian" and len(anchors) < 4:
            raise ValueError("too few anchors for a covariance")
        return projection_fitter(kind, anchors, inv_temperature, prior, **options)

    frame = budget_experiment(
        archive,
        [view],
        BudgetConfig(anchor_counts=(2, 4), repeats=2, geometries=("softmax", "gaussian")),
        PROTOCOL,
        FAST,
        ("Pleural Effusion",),
        fitter=picky,
        show_progress=False,
    )
    gaussian = frame[frame["geometry"] == "gaussian"]
    assert sorted(set(gaussian["n_anchors"])) == [4]
    assert any("too few anchors" in note for note in frame.attrs["skipped"])


def test_two_option_variants_of_one_model_are_drawn_apart():
    """Fig. 5 with k=32 and k=variance: one colour, distinct labels, line styles and markers."""
    import pandas as pd

    from chexretrieve.evaluation.figures import budget_curves

    rows = [
        {"finding": "Average", "geometry": g, "n_anchors": n, "mean": m, "low": m - 0.1, "high": m}
        for g in (
            "cosine",
            "softmax",
            "posterior_latent_spherical:k=32",
            "posterior_latent_spherical:k=variance",
        )
        for n, m in ((2, 0.3), (4, 0.4))
    ]
    fig = budget_curves(pd.DataFrame(rows), "Posterior adaptation")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    first = lines["Posterior latent spherical (k=32)"]
    second = lines["Posterior latent spherical (k=variance)"]
    assert first.get_color() == second.get_color()
    styles = {(line.get_linestyle(), line.get_marker()) for line in (first, second)}
    assert len(styles) == 2
    assert lines["Softmax"].get_linestyle() == ":"  # target-only beside posterior models: dotted
