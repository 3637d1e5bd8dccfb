"""Store API: one-transaction writes, conflicts, per-encoder galleries, labels, anchors, runs."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from store_fixtures import image_record, unit_vector

from chexretrieve.findings import FINDINGS
from chexretrieve.store import BatchItem, ImageFilter, Outcome, SourceStamp


def test_add_image_stores_row_embedding_and_labels(store):
    record = image_record(1)
    vector = unit_vector(1, 8)
    outcome = store.add_image_with_embedding(
        record, vector, "fake:a", labels={"pleural effusion": 1, "Edema": -1, "cardiomegaly": None}
    )
    assert outcome.outcome == "ingested" and outcome.image_id is not None
    assert store.has_image(record.sop_uid) and not store.has_image("9.9")
    stored = store.image_by_id(outcome.image_id)
    assert stored.sop_uid == record.sop_uid and stored.study_uid == record.study_uid
    assert stored.study_date == record.study_date and stored.patient_age_years == 21.0
    assert store.image_by_sop_uid(record.sop_uid) == stored
    np.testing.assert_array_equal(store.embeddings_for("fake:a", [outcome.image_id])[0], vector)
    labels = store.labels_frame()
    assert list(labels.columns) == list(FINDINGS)
    row = labels.loc[outcome.image_id]
    assert row["Pleural Effusion"] == 1.0 and row["Edema"] == -1.0
    assert np.isnan(row["Cardiomegaly"]) and np.isnan(row["Fracture"])
    assert store.integrity_check() == []


def test_same_uid_same_pixels_is_already_present_and_different_pixels_a_conflict(store):
    first = store.add_image_with_embedding(image_record(1), unit_vector(1, 8), "fake:a")
    revision = store.archive_revision()
    again = store.add_image_with_embedding(image_record(1), unit_vector(2, 8), "fake:a")
    assert again.outcome == "already-present" and again.image_id == first.image_id
    other_pixels = image_record(1, pixels="edited")
    conflict = store.add_image_with_embedding(other_pixels, unit_vector(3, 8), "fake:a")
    assert conflict.outcome == "conflict" and conflict.reason == "same-uid-different-pixels"
    assert "already stored as image" in conflict.detail and "kept" in conflict.detail
    assert store.count_images() == 1
    kept = store.image_by_id(first.image_id)
    assert kept.pixel_sha256 == image_record(1).pixel_sha256
    np.testing.assert_array_equal(store.embeddings_for("fake:a", [1])[0], unit_vector(1, 8))
    assert store.archive_revision() == revision


def test_galleries_never_mix_encoders(store):
    for i in range(5):
        store.add_image_with_embedding(image_record(i), unit_vector(i, 8), "fake:a")
    for i in (1, 3):
        out = store.add_image_with_embedding(image_record(i), unit_vector(100 + i, 4), "fake:b")
        assert out.outcome == "embedded"
    gallery_a = store.gallery("fake:a")
    gallery_b = store.gallery("fake:b")
    assert gallery_a.vectors.shape == (5, 8) and gallery_a.vectors.dtype == np.float32
    assert gallery_b.vectors.shape == (2, 4)
    assert list(gallery_b.metadata["sop_uid"]) == [image_record(1).sop_uid, image_record(3).sop_uid]
    np.testing.assert_array_equal(gallery_b.vectors[1], unit_vector(103, 4))
    assert list(gallery_a.image_ids) == list(gallery_a.metadata.index)
    with pytest.raises(ValueError, match="not in the store"):
        store.gallery("fake:unknown")


def test_gallery_filters(store):
    for i in range(12):
        store.add_image_with_embedding(
            image_record(i, split="train" if i < 8 else "valid"),
            unit_vector(i, 8),
            "fake:a",
            labels={"Edema": 1.0} if i % 4 == 0 else {"Edema": None},
        )
    meta = store.gallery("fake:a").metadata

    def ids(**kwargs):
        return set(store.gallery("fake:a", ImageFilter(**kwargs)).metadata["sop_uid"])

    def naive(mask):
        return set(meta[mask]["sop_uid"])

    assert ids(view_positions=("pa",)) == naive(meta.view_position == "PA")
    assert ids(sexes=("F",)) == naive(meta.patient_sex == "F")
    assert ids(min_age_years=25, max_age_years=28) == naive(meta.patient_age_years.between(25, 28))
    day = dt.date(2020, 1, 5)
    assert ids(date_from=day) == naive(meta.study_date >= day)
    assert ids(splits=("valid",)) == naive(meta.split == "valid")
    assert ids(labelled_for="edema") == naive(meta.index.isin([1, 5, 9]))
    assert ids(image_ids=(2, 3, 99)) == naive(meta.index.isin([2, 3]))
    excluded = image_record(0).study_uid
    assert ids(exclude_study_uids=(excluded,)) == naive(meta.study_uid != excluded)
    both = store.gallery("fake:a", ImageFilter(splits=("train",), sexes=("M",)))
    assert len(both.image_ids) == both.vectors.shape[0] == 4


def test_a_failing_batch_writes_nothing(store):
    good = BatchItem("/a/1.dcm", image_record(1), unit_vector(1, 8), {"Edema": 1})
    bad = BatchItem("/a/2.dcm", image_record(2), np.ones(5, np.float32))  # wrong dimension
    with pytest.raises(ValueError, match="shape"):
        store.write_batch("fake:a", [good, bad])
    nan = BatchItem("/a/3.dcm", image_record(3), np.full(8, np.nan, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        store.write_batch("fake:a", [good, nan])
    bad_label = BatchItem("/a/4.dcm", image_record(4), unit_vector(4, 8), {"Edema": 2})
    with pytest.raises(ValueError, match="expected 1, 0, -1"):
        store.write_batch("fake:a", [good, bad_label])
    unknown = BatchItem("/a/5.dcm", image_record(5), unit_vector(5, 8), {"Broken Heart": 1})
    with pytest.raises(ValueError, match="unknown finding"):
        store.write_batch("fake:a", [good, unknown])
    counts = store.table_counts()
    assert counts["images"] == counts["embeddings"] == counts["labels"] == counts["studies"] == 0


def test_batch_outcomes_sources_and_runs(store):
    run = store.start_run("fake:a", {"batch_size": 2})
    stamp = SourceStamp("/a/1.dcm", 1234, 5678)
    items = [
        BatchItem("/a/1.dcm", image_record(1, study=7), unit_vector(1, 8), stamp=stamp),
        BatchItem("/a/2.dcm", image_record(2, study=7), unit_vector(2, 8)),
        BatchItem("/a/1-copy.dcm", image_record(1, study=7), unit_vector(1, 8)),
    ]
    rejected = Outcome("/a/junk.dcm", "rejected", reason="not-dicom", detail="no DICM preamble")
    outcomes = store.write_batch("fake:a", items, run_id=run, extra_outcomes=[rejected])
    assert [o.outcome for o in outcomes] == ["ingested", "ingested", "already-present"]
    assert store.table_counts()["studies"] == 1
    assert store.unchanged_sources([stamp], "fake:a") == {"/a/1.dcm": outcomes[0].image_id}
    assert store.unchanged_sources([SourceStamp("/a/1.dcm", 1234, 9999)], "fake:a") == {}
    assert store.unchanged_sources([stamp], "fake:b") == {}
    store.finish_run(run, "completed", {"ingested": 2})
    frame = store.outcomes_frame(run)
    assert list(frame.outcome) == ["ingested", "ingested", "already-present", "rejected"]
    assert frame.reason.iloc[3] == "not-dicom"
    runs = store.runs_frame()
    assert runs.status.tolist() == ["completed"] and '"ingested": 2' in runs.counts_json[0]
    shortcut = BatchItem("/a/1.dcm", known_image_id=outcomes[0].image_id, stamp=stamp)
    known = store.write_batch("fake:a", [shortcut])
    assert known[0].outcome == "already-present" and "unchanged" in known[0].detail


def test_runs_of_dead_processes_become_interrupted(store):
    run = store.start_run("fake:a", {})
    with store._write() as conn:  # simulate a run whose process was killed
        conn.exec_driver_sql(f"UPDATE ingest_runs SET pid = 999999999 WHERE id = {run}")
    store.start_run("fake:a", {})
    assert store.runs_frame().status.tolist() == ["interrupted", "running"]


def test_labels_can_be_updated_and_bump_the_revision(store):
    out = store.add_image_with_embedding(
        image_record(1), unit_vector(1, 8), "fake:a", labels={"Edema": 0}
    )
    before = store.archive_revision()
    assert store.set_labels(out.image_id, {"Edema": 1, "Fracture": -1})
    assert not store.set_labels(out.image_id, {"Edema": 1})
    assert store.archive_revision() == before + 1
    row = store.labels_frame().loc[out.image_id]
    assert row["Edema"] == 1.0 and row["Fracture"] == -1.0
    assert store.labels_frame(image_ids=[999]).empty


def test_anchor_embedding_cache(store):
    matrix = np.stack([unit_vector(i, 8) for i in range(6)])
    assert store.get_anchor_embeddings("edema-a", "3", "sha256:abc", "fake:a") is None
    store.put_anchor_embeddings("edema-a", "3", "sha256:abc", "fake:a", matrix)
    np.testing.assert_array_equal(
        store.get_anchor_embeddings("edema-a", "3", "sha256:abc", "fake:a"), matrix
    )
    assert store.get_anchor_embeddings("edema-a", "3", "sha256:other", "fake:a") is None
    assert store.get_anchor_embeddings("edema-a", "4", "sha256:abc", "fake:a") is None
    assert store.get_anchor_embeddings("edema-a", "3", "sha256:abc", "fake:b") is None
    store.put_anchor_embeddings("edema-a", "3", "sha256:abc", "fake:a", matrix[:2])  # replaces
    assert store.get_anchor_embeddings("edema-a", "3", "sha256:abc", "fake:a").shape == (2, 8)
    frame = store.anchor_embeddings_frame()
    assert frame[["anchor_set_id", "n_sentences", "dim"]].values.tolist() == [["edema-a", 2, 8]]
    with pytest.raises(ValueError, match="dimension 4"):
        store.put_anchor_embeddings("edema-a", "3", "h", "fake:a", np.ones((3, 4)))
    with pytest.raises(ValueError, match="not in the store"):
        store.put_anchor_embeddings("edema-a", "3", "h", "nope", matrix)


def test_encoder_ids_keep_their_dimension(store):
    assert store.register_encoder("fake:a", 8, 20.0).embed_dim == 8
    with pytest.raises(ValueError, match="stored with dimension 8"):
        store.register_encoder("fake:a", 16, 20.0)


def test_integrity_check_finds_an_image_without_embedding(store):
    out = store.add_image_with_embedding(image_record(1), unit_vector(1, 8), "fake:a")
    with store._write() as conn:
        conn.exec_driver_sql(f"DELETE FROM embeddings WHERE image_id = {out.image_id}")
    assert store.integrity_check() == ["1 images have no embedding"]


def test_copies_within_one_batch(store):
    items = [
        BatchItem("/a/1.dcm", image_record(1), unit_vector(1, 8), {"Edema": 1}),
        BatchItem("/b/1.dcm", image_record(1), None),  # same image again: no second embedding
        BatchItem("/c/1.dcm", image_record(1, pixels="other"), unit_vector(3, 8)),
    ]
    outcomes = store.write_batch("fake:a", items)
    assert [o.outcome for o in outcomes] == ["ingested", "already-present", "conflict"]
    assert outcomes[1].image_id == outcomes[0].image_id
    assert "an earlier file of this batch" in outcomes[2].detail
    assert store.count_images() == 1 and store.count_embeddings("fake:a") == 1
    assert store.integrity_check() == []
