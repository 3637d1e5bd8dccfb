"""The retrieval protocol: queries, keys, uncertain and blank labels, leave-one-out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from chexretrieve.evaluation.config import ProtocolConfig
from chexretrieve.evaluation.protocol import (
    LabelledArchive,
    category_task,
    finding_task,
    task_summary,
)


def _archive():
    labels = pd.DataFrame(
        {
            "Edema": [1, 0, -1, np.nan, 1, 1, 0, -1, np.nan],
            "Frontal/Lateral": ["Frontal"] * 8 + ["Lateral"],
            "view": ["AP", "PA", "AP", "PA", "AP", "PA", "AP", None, "PA"],
        }
    )
    splits = np.array(["train"] * 5 + ["valid"] * 4)
    return LabelledArchive(np.array([f"i{i}" for i in range(9)]), splits, labels)


def test_finding_task_default_rules():
    task = finding_task(_archive(), "Edema", ProtocolConfig())
    # keys: train rows minus the uncertain one (2); blank (3) counts as negative
    assert task.key_index.tolist() == [0, 1, 3, 4]
    assert task.key_class.tolist() == [1, 0, 0, 1]
    # queries: valid rows labelled 1 (row 5 only; 7 is uncertain, 8 blank)
    assert task.query_index.tolist() == [5]
    assert task.relevance().tolist() == [[True, False, False, True]]
    summary = task_summary(task)
    assert summary["n_keys"] == 4 and summary["n_queries"] == 1
    assert summary["prevalence"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("blank_as", "uncertain_as", "keys", "classes"),
    [
        ("drop", "drop", [0, 1, 4], [1, 0, 1]),
        ("negative", "positive", [0, 1, 2, 3, 4], [1, 0, 1, 0, 1]),
        ("drop", "negative", [0, 1, 2, 4], [1, 0, 0, 1]),
    ],
)
def test_configurable_label_rules(blank_as, uncertain_as, keys, classes):
    config = ProtocolConfig(blank_as=blank_as, uncertain_as=uncertain_as)
    task = finding_task(_archive(), "Edema", config)
    assert task.key_index.tolist() == keys
    assert task.key_class.tolist() == classes


def test_views_default_to_frontal_from_the_view_column():
    task = finding_task(_archive(), "Edema", ProtocolConfig())
    assert 8 not in task.key_index and 8 not in task.query_index
    lateral = category_task(_archive(), "view", ProtocolConfig(views="lateral"))
    assert lateral.query_index.tolist() == [8] and lateral.n_keys == 0
    every = category_task(_archive(), "view", ProtocolConfig(views="all"))
    assert 8 in every.query_index


def test_category_task_split_and_leave_one_out():
    archive = _archive()
    task = category_task(archive, "view", ProtocolConfig(views="all"))
    assert task.key_index.tolist() == [0, 1, 2, 3, 4]
    assert task.query_index.tolist() == [5, 6, 8]  # row 7 has no view
    rel = task.relevance()
    assert rel[0].tolist() == [False, True, False, True, False]  # query 5 is PA
    loo = category_task(archive, "view", leave_one_out=True)
    assert loo.exclude_self and loo.n_queries == 8
    assert loo.n_relevant()[0] == 3  # AP images other than row 0: rows 2, 4, 6


def test_bad_inputs_name_the_problem():
    archive = _archive()
    with pytest.raises(ValueError, match="no column 'Fracture'"):
        finding_task(archive, "Fracture", ProtocolConfig())
    with pytest.raises(ValueError, match="blank_as"):
        ProtocolConfig(blank_as="zero")
    with pytest.raises(ValueError, match="another split"):
        ProtocolConfig(key_split="valid")
    bad = LabelledArchive(archive.image_ids, archive.splits, archive.labels.assign(Edema=2))
    with pytest.raises(ValueError, match="other than 1, 0, -1"):
        finding_task(bad, "Edema", ProtocolConfig())
    with pytest.raises(ValueError, match="not unique"):
        LabelledArchive(np.array(["a", "a"]), np.array(["train", "valid"]), archive.labels[:2])
    no_view = LabelledArchive(archive.image_ids, archive.splits, archive.labels[["Edema"]])
    with pytest.raises(ValueError, match="record no view"):
        finding_task(no_view, "Edema", ProtocolConfig(views="lateral"))
    # no view recorded at all: frontal (the default) uses every image
    unviewed = LabelledArchive(archive.image_ids, archive.splits, archive.labels[["Edema", "view"]])
    assert category_task(unviewed, "view", ProtocolConfig()).query_index.tolist() == [5, 6, 8]
    with pytest.raises(ValueError, match="views must be one of frontal, lateral, all"):
        ProtocolConfig(views="pa")


def test_geometry_specs_accept_the_search_spelling_of_posteriors():
    from chexretrieve.evaluation.geometries import parse_geometry

    spec = parse_geometry("gmm_posterior:n_components=2")
    assert (spec.name, spec.kind, spec.posterior) == ("posterior_gmm:n_components=2", "gmm", True)
    assert spec.options == {"n_components": 2}
    assert parse_geometry("posterior_gaussian") == parse_geometry("gaussian_posterior")
    with pytest.raises(ValueError, match="unknown geometry 'movmf_posterior'"):
        parse_geometry("movmf_posterior")
