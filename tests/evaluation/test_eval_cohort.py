"""Views, patients and the patient-overlap check, on label tables shaped like each source's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from eval_fakes import projection_fitter, toy_world

from chexretrieve.evaluation.cohort import (
    PatientOverlapError,
    dataset_names,
    patient_ids,
    select_cohort,
    view_groups,
)
from chexretrieve.evaluation.config import IntervalConfig, ProtocolConfig, RetrievalEvalConfig
from chexretrieve.evaluation.protocol import LabelledArchive, finding_task
from chexretrieve.evaluation.runner import run_retrieval
from chexretrieve.evaluation.summaries import auprc_table


def _store_like(patients, splits, views, paths=None):
    """A label frame as Store.labels_frame() returns it after a data-set ingest."""
    n = len(patients)
    labels = pd.DataFrame(
        {
            "Edema": [1.0] * n,
            "patient_id": patients,
            "study_id": [f"{p}/s1" for p in patients],
            "view_group": views,
            "view_position": ["PA" if v == "frontal" else "LL" for v in views],
            "split": splits,
            "dataset_path": paths or [f"files/{p}/img{i}.jpg" for i, p in enumerate(patients)],
        }
    )
    return LabelledArchive(np.array([str(100 + i) for i in range(n)]), np.array(splits), labels)


def test_views_come_from_each_sources_own_column():
    store = pd.DataFrame({"view_group": ["frontal", "lateral", ""], "view_position": ["PA"] * 3})
    assert view_groups(store)[0].tolist() == ["frontal", "lateral", ""]
    assert view_groups(store)[1] == "view_group"
    chexpert = pd.DataFrame({"Frontal/Lateral": ["Frontal", "Lateral", None]})
    groups, column = view_groups(chexpert)
    assert groups.tolist() == ["frontal", "lateral", ""] and column == "Frontal/Lateral"
    # a store ingested before view_group existed: DICOM ViewPosition (the --frontal-only crash)
    dicom = pd.DataFrame(
        {"view_group": ["", "", "", ""], "view_position": ["PA", "AP", "LATERAL", "LL"]}
    )
    groups, column = view_groups(dicom)
    assert groups.tolist() == ["frontal", "frontal", "lateral", "lateral"]
    assert column == "view_position"
    assert view_groups(pd.DataFrame({"Edema": [1.0]})) == (None, None)


def test_laterals_are_left_out_by_default_and_counted():
    archive = _store_like(
        ["a", "a", "b", "b", "c", "d"],
        ["train", "train", "train", "valid", "valid", "valid"],
        ["frontal", "lateral", "frontal", "lateral", "frontal", ""],
    )
    archive = LabelledArchive(archive.image_ids, archive.splits, archive.labels.assign(
        patient_id=["a", "a", "b", "e", "c", "d"]))  # fmt: skip
    cohort = select_cohort(archive, ProtocolConfig())
    assert cohort.usable.tolist() == [True, False, True, False, True, False]
    assert cohort.view_counts == {"frontal": 3, "lateral": 2, "unknown": 1}
    assert cohort.excluded_by_view == 3 and cohort.view_column == "view_group"
    task = finding_task(archive, "Edema", ProtocolConfig())
    assert task.query_index.tolist() == [4] and task.key_index.tolist() == [0, 2]
    lateral = finding_task(archive, "Edema", ProtocolConfig(views="lateral"))
    assert lateral.query_index.tolist() == [3] and lateral.key_index.tolist() == [1]


def test_splits_sharing_patients_are_refused_naming_count_and_ids():
    patients = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p1", "p2", "p3", "p4", "p5", "p6"]
    splits = ["train"] * 8 + ["valid"] * 6
    archive = _store_like(patients, splits, ["frontal"] * 14)
    with pytest.raises(PatientOverlapError) as caught:
        select_cohort(archive, ProtocolConfig())
    message = str(caught.value)
    assert message.startswith("6 patients have images in both the query split 'valid' and the key")
    assert "(e.g. p1, p2, p3, p4, p5, ...)" in message and "--allow-patient-overlap" in message
    allowed = select_cohort(archive, ProtocolConfig(allow_patient_overlap=True))
    assert allowed.overlap == ("p1", "p2", "p3", "p4", "p5", "p6") and allowed.overlap_allowed
    # the overlap counts only the views used: p1's valid image is lateral, so frontal is clean
    views = ["frontal"] * 8 + ["lateral"] * 6
    assert select_cohort(_store_like(patients, splits, views), ProtocolConfig()).overlap == ()
    # the run refuses too, before any fitting
    archive_run = LabelledArchive(
        np.array([f"img{i:04d}" for i in range(len(patients))]), np.array(splits), archive.labels
    )
    _, view = toy_world(n_train=8, n_valid=6)
    config = RetrievalEvalConfig(findings=("Edema",), geometries=("cosine",))
    with pytest.raises(PatientOverlapError, match="6 patients"):
        run_retrieval(archive_run, [view], config, fitter=projection_fitter, show_progress=False)


def test_patient_and_name_columns():
    archive = _store_like(["a", None, "b"], ["train", "train", "valid"], ["frontal"] * 3)
    patients, column = patient_ids(archive)
    assert column == "patient_id" and patients.tolist() == ["a", "image:101", "b"]
    assert dataset_names(archive).tolist() == ["files/a/img0.jpg", "files/None/img1.jpg",
                                               "files/b/img2.jpg"]  # fmt: skip
    bare = LabelledArchive(archive.image_ids, archive.splits, archive.labels[["Edema"]])
    assert patient_ids(bare)[1] is None
    assert patient_ids(bare)[0].tolist() == ["image:100", "image:101", "image:102"]
    assert dataset_names(bare).tolist() == ["100", "101", "102"]


def test_the_tables_resample_patients_and_one_patient_gets_no_interval():
    """In the toy world images 2i and 2i+1 are one patient: the run's intervals are the cluster
    bootstrap's, and a finding whose queries are one patient's is reported without interval."""
    archive, view = toy_world()
    labels = archive.labels.copy()
    valid = np.flatnonzero(archive.splits == "valid")
    labels["Cardiomegaly"] = 0.0
    labels.loc[valid[:2], "Cardiomegaly"] = 1.0  # the two images of one patient
    labels.loc[np.flatnonzero(archive.splits == "train")[:20], "Cardiomegaly"] = 1.0
    archive = LabelledArchive(archive.image_ids, archive.splits, labels)
    config = RetrievalEvalConfig(
        findings=("Pleural Effusion", "Cardiomegaly"),
        geometries=("cosine", "softmax"),
        protocol=ProtocolConfig(min_queries=2),
        intervals=IntervalConfig(n_bootstrap=200),
    )
    run = run_retrieval(archive, [view], config, fitter=projection_fitter, show_progress=False)
    table = auprc_table(run, config.intervals).set_index(["finding", "geometry"])
    cardiomegaly = table.loc[("Cardiomegaly", "softmax")]
    assert (
        np.isnan(cardiomegaly["low"])
        and "1 patient among the queries" in cardiomegaly["interval_note"]
    )
    effusion = table.loc[("Pleural Effusion", "softmax")]
    queries = run.queries[run.queries["finding"] == "Pleural Effusion"]
    assert effusion["n_patients"] == queries["patient"].nunique() < len(queries)
    image_level = auprc_table(run, IntervalConfig(n_bootstrap=200, unit="image"))
    row = image_level.set_index(["finding", "geometry"]).loc[("Pleural Effusion", "softmax")]
    assert row["n_patients"] == len(queries)  # each image its own cluster
    assert (row["low"], row["high"]) != (effusion["low"], effusion["high"])


def test_a_split_that_is_not_there_is_named_with_the_ones_that_are():
    archive = _store_like(["a", "b", "c"], ["train", "train", "validate"], ["frontal"] * 3)
    with pytest.raises(ValueError) as caught:
        select_cohort(archive, ProtocolConfig(query_split="test"))
    assert str(caught.value) == (
        "no image is in the query split 'test'; the splits here are: train (2 images), validate "
        "(1 image). Choose another with --query-split"
    )
    assert select_cohort(archive, ProtocolConfig(query_split="validate")).usable.all()
    with pytest.raises(ValueError, match="no image is in the key split 'training'"):
        select_cohort(archive, ProtocolConfig(query_split="validate", key_split="training"))
