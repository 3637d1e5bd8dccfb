"""The evaluation run on a toy world whose anchors carry the finding: tables, pairing, skipping."""

from __future__ import annotations

import numpy as np
import pytest
from eval_fakes import ProjectionGeometry, projection_fitter, toy_world

from chexretrieve.evaluation.config import IntervalConfig, RetrievalEvalConfig
from chexretrieve.evaluation.protocol import finding_task
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.scoring import task_average_precision
from chexretrieve.evaluation.summaries import (
    auprc_table,
    difference_table,
    table2_pairs,
    table3_pairs,
)
from chexretrieve.metrics import average_precision_rows

FAST = IntervalConfig(n_bootstrap=200, seed=0)


def _config(**kw):
    base = dict(
        findings=("Pleural Effusion", "Cardiomegaly"),
        geometries=("cosine", "iti", "softmax", "gaussian", "posterior_gmm"),
        intervals=FAST,
    )
    base.update(kw)
    return RetrievalEvalConfig(**base)


def test_batched_scoring_equals_one_block():
    archive, view = toy_world()
    task = finding_task(archive, "Pleural Effusion", _config().protocol)
    geom = ProjectionGeometry(view.anchors.pooled("Pleural Effusion"))
    (small,) = task_average_precision(geom, view.embeddings, [task], max_block_elements=200)
    scores = geom.score(
        geom.features(view.embeddings[task.query_index]),
        geom.features(view.embeddings[task.key_index]),
    )
    np.testing.assert_allclose(small, average_precision_rows(scores, task.relevance()))


def test_run_shapes_and_anchor_geometry_wins_on_the_toy_world():
    archive, view = toy_world()
    run = run_retrieval(archive, [view], _config(), fitter=projection_fitter, show_progress=False)
    n_q = {f: int(n) for f, n in zip(run.tasks["finding"], run.tasks["n_queries"], strict=True)}
    per = run.per_query
    # every geometry x 3 variants x queries, for both findings
    for finding, count in n_q.items():
        rows = per[(per["finding"] == finding) & (per["geometry"] == "softmax")]
        assert len(rows) == 3 * count
    # cosine does not depend on the anchors: identical across variants
    cos = per[(per["geometry"] == "cosine") & (per["finding"] == "Pleural Effusion")]
    assert cos.groupby("query")["ap"].nunique().max() == 1

    diffs = difference_table(run, table2_pairs(run), FAST)
    effusion = diffs[(diffs["finding"] == "Pleural Effusion") & (diffs["reference"] == "cosine")]
    assert effusion["mean"].iloc[0] > 0.05  # projection onto the finding axis removes the nuisance
    assert (diffs["low"] <= diffs["mean"]).all() and (diffs["mean"] <= diffs["high"]).all()
    assert "Average" in set(diffs["finding"])
    table3 = difference_table(run, table3_pairs(run), FAST)
    assert {"softmax", "gaussian", "posterior_gmm"} <= set(table3["geometry"])
    absolute = auprc_table(run, FAST)
    assert absolute["mean"].between(0, 1).all()


def test_difference_equals_difference_of_means():
    archive, view = toy_world(seed=3)
    run = run_retrieval(archive, [view], _config(), fitter=projection_fitter, show_progress=False)
    per = run.per_query
    diffs = difference_table(run, [("softmax", "cosine")], FAST)
    for finding in ("Pleural Effusion", "Cardiomegaly"):
        means = per[per["finding"] == finding].groupby("geometry")["ap"].mean()
        got = diffs[diffs["finding"] == finding]["mean"].iloc[0]
        assert got == pytest.approx(means["softmax"] - means["cosine"])


def test_skips_are_reported_not_silent():
    archive, view = toy_world()
    labels = archive.labels.copy()
    labels["Edema"] = 0.0
    archive = type(archive)(archive.image_ids, archive.splits, labels)
    no_broad = type(view.anchors)(findings=view.anchors.findings, broad=None)
    view = type(view)(view.encoder_id, view.inv_temperature, view.embeddings, no_broad)
    config = _config(findings=("Pleural Effusion", "Edema"))
    run = run_retrieval(archive, [view], config, fitter=projection_fitter, show_progress=False)
    reasons = dict(run.skipped)
    assert "Edema" in reasons and "posterior_gmm" in reasons
    assert set(run.per_query["finding"]) == {"Pleural Effusion"}


def test_no_views_is_an_error():
    archive, _ = toy_world()
    with pytest.raises(ValueError, match="at least one checkpoint"):
        run_retrieval(archive, [], _config(), fitter=projection_fitter, show_progress=False)


def test_a_geometry_that_rejects_the_anchors_is_dropped_and_reported():
    archive, view = toy_world()

    def picky(kind, anchors, inv_temperature=100.0, prior=None, **options):
        if kind == "gaussian":
            raise ValueError("degenerate anchor covariance")
        return projection_fitter(kind, anchors, inv_temperature, prior, **options)

    run = run_retrieval(archive, [view], _config(), fitter=picky, show_progress=False)
    assert "gaussian" not in set(run.per_query["geometry"])
    reasons = dict(run.skipped)
    assert "degenerate anchor covariance" in reasons["gaussian on Pleural Effusion"]
    diffs = difference_table(run, table3_pairs(run), FAST)  # the others still tabulate
    assert "softmax" in set(diffs["geometry"]) and "gaussian" not in set(diffs["geometry"])


def test_a_posterior_latent_model_equal_to_cosine_is_refused_with_its_reason():
    """k = d (16 here) ranks exactly as cosine: the real geometry refuses it and the run reports
    why; the default k (95%-variance rule) is scored."""
    archive, view = toy_world()
    config = _config(
        findings=("Pleural Effusion",),
        geometries=("cosine", "posterior_latent_gaussian", "posterior_latent_spherical:k=16"),
    )
    run = run_retrieval(archive, [view], config, show_progress=False)
    scored = set(run.per_query["geometry"])
    assert "posterior_latent_gaussian" in scored
    assert "posterior_latent_spherical:k=16" not in scored
    (why,) = [w for what, w in run.skipped if what.startswith("posterior_latent_spherical:k=16")]
    assert "CosineEquivalentGeometryError" in why and "ranks exactly as cosine" in why
    ours = run.per_query[run.per_query["geometry"] == "posterior_latent_gaussian"]["ap"]
    cosine = run.per_query[run.per_query["geometry"] == "cosine"]["ap"]
    assert not np.allclose(np.sort(ours.to_numpy()), np.sort(cosine.to_numpy()))
