"""The report states the protocol it used: the Protocol and Intervals paragraphs follow the options,
the query and key lists name data-set paths, and a run that scores nothing fails."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from eval_fakes import projection_fitter, toy_world

from chexretrieve.evaluation.config import (
    EvaluationPlan,
    IntervalConfig,
    ProtocolConfig,
    RetrievalEvalConfig,
)
from chexretrieve.evaluation.pipeline import NothingEvaluatedError, evaluate
from chexretrieve.evaluation.protocol import LabelledArchive
from chexretrieve.evaluation.report import write_report


def _world(leak: int = 0):
    """The toy world with views (every 5th image lateral), CheXpert-like paths and, with
    ``leak``, that many validation images given to training patients."""
    archive, view = toy_world()
    n = len(archive)
    labels = archive.labels.copy()
    labels["view_group"] = np.where(np.arange(n) % 5 == 4, "lateral", "frontal")
    labels["dataset_path"] = [
        f"{s}/patient{p[1:]}/study1/view{1 + (i % 5 == 4)}.jpg"
        for i, (s, p) in enumerate(zip(archive.splits, labels["patient_id"], strict=True))
    ]
    valid = np.flatnonzero(archive.splits == "valid")
    labels.loc[valid[:leak], "patient_id"] = [f"p{i}" for i in range(leak)]
    return LabelledArchive(archive.image_ids, archive.splits, labels), view


def _plan(**protocol):
    return EvaluationPlan(
        retrieval=RetrievalEvalConfig(
            findings=("Pleural Effusion", "Cardiomegaly"),
            geometries=("cosine", "softmax", "posterior_gaussian"),
            protocol=ProtocolConfig(**protocol),
            intervals=IntervalConfig(n_bootstrap=50),
        ),
        experiments=(),
    )


def _report(archive, view, plan, **kw):
    return evaluate(
        archive, [view], plan, title="t", command="c", source="toy", fitter=projection_fitter,
        show_progress=False, broad_sets=("broad/clinical@2",), **kw,
    )  # fmt: skip


def test_the_protocol_paragraph_follows_the_options():
    archive, view = _world(leak=3)
    default = _report(archive, view, _plan(allow_patient_overlap=True)).protocol
    assert "Queries: images of the `valid` split" in default
    assert "Keys: images of the `train` split" in default
    assert "dropped for that finding (the paper's rule) (`uncertain_as=drop`)" in default
    assert "counted as negative (CheXpert's convention) (`blank_as=negative`)" in default
    assert "frontal images only (`views=frontal`, as CheXzero evaluates; from the `view_group`" in (
        default
    )
    assert "3 patients have images in both the query and the key split (e.g. p0, p1, p2)" in default
    assert "`--allow-patient-overlap` was given" in default
    assert "fewer than 10 queries (`min_queries=10`)" in default
    assert "the broad anchor sets `broad/clinical@2`" in default

    changed = _report(
        archive,
        view,
        _plan(
            uncertain_as="positive", blank_as="drop", views="all", allow_patient_overlap=True,
            min_queries=3,
        ),
    ).protocol  # fmt: skip
    assert "counted as positive (U-Ones) (`uncertain_as=positive`)" in changed
    assert "a blank one dropped (`blank_as=drop`)" in changed
    assert "Views: all (`views=all`; from the `view_group` column: 160 frontal, 40 lateral" in (
        changed
    )
    assert "fewer than 3 queries (`min_queries=3`)" in changed
    assert changed != default

    clean, _ = _world()
    swapped = _report(clean, view, _plan(query_split="train", key_split="valid", min_queries=2))
    assert "Queries: images of the `train` split" in swapped.protocol
    assert "Keys: images of the `valid` split" in swapped.protocol
    assert "share no patient (checked)" in swapped.protocol
    assert "patients with replacement (a cluster bootstrap" in swapped.interval_text
    assert "from `patient_id`" in swapped.interval_text
    by_image = evaluate(
        clean, [view], replace(_plan(), retrieval=replace(_plan().retrieval, geometries=(
            "cosine", "softmax"), intervals=IntervalConfig(n_bootstrap=50, unit="image"))),
        title="t", command="c", source="toy", fitter=projection_fitter, show_progress=False,
    )  # fmt: skip
    assert "the query images with replacement (`--bootstrap-unit image`)" in by_image.interval_text
    assert "No posterior geometry was evaluated" in by_image.protocol


def test_the_report_folder_lists_queries_and_keys_by_data_set_path(tmp_path):
    archive, view = _world()
    report = _report(archive, view, _plan())
    write_report(report, tmp_path)
    queries = pd.read_csv(tmp_path / "queries.csv")
    assert {"finding", "query", "image", "patient", "view", "split"} <= set(queries.columns)
    assert queries["image"].str.match(r"valid/patient\d+/study1/view1\.jpg").all()
    assert set(queries["view"]) == {"frontal"} and set(queries["split"]) == {"valid"}
    assert queries.groupby("finding").size().to_dict() == {"Pleural Effusion": 16}
    keys = pd.read_csv(tmp_path / "keys.csv")
    assert keys["image"].str.startswith("train/").all() and set(keys["view"]) == {"frontal"}
    assert set(keys["Pleural Effusion"].dropna()) == {0.0, 1.0}
    # 120 training images - 24 laterals - 5 frontal uncertain (rows 0-3, 5) = 91 keys
    assert len(keys) == 91 and not keys["image"].isin(["train/patient0/study1/view1.jpg"]).any()
    per_query = pd.read_csv(tmp_path / "per_query_ap.csv.gz")
    assert per_query["image"].str.startswith("valid/").all()
    names = queries.drop_duplicates("query").set_index("query")["image"]
    assert (per_query["image"] == per_query["query"].map(names)).all()
    md = (tmp_path / "report.md").read_text()
    assert "Protocol: Queries: images of the `valid` split" in md
    # Cardiomegaly has 9 frontal queries, below min_queries = 10: listed, not scored
    assert (
        "## Skipped\n\nCardiomegaly: 9 queries in the query split, fewer than min_queries = 10"
        in md
    )


def test_nothing_evaluated_is_an_error_naming_the_reasons():
    archive, view = _world()
    with pytest.raises(NothingEvaluatedError) as caught:
        _report(archive, view, _plan(min_queries=500))
    message = str(caught.value)
    assert message.startswith("nothing could be evaluated: every finding was skipped")
    assert "Pleural Effusion:" in message and "queries in the query split" in message
    assert "min_queries (500)" in message
