"""Store level: annotations of stored images, change counts and reports (SQLite and PostgreSQL)."""

from __future__ import annotations

import collections
import datetime as dt

import numpy as np
import pytest

from chexretrieve.store import BatchItem, ImageRecord, open_store


def _item(i: int, annotation: dict | None, labels: dict | None = None) -> BatchItem:
    record = ImageRecord(sop_uid=f"1.2.9.{i}", study_uid=f"1.2.8.{i}", pixel_sha256=f"{i:064x}")
    vector = np.zeros(4, np.float32)
    vector[i % 4] = 1.0
    return BatchItem(f"/a/{i}.jpg", record, vector, labels, annotation=annotation)


def check_annotations(store) -> None:  # noqa: ANN001
    store.register_encoder("fake:a", 4, 10.0)
    first = store.write_batch("fake:a", [_item(1, None, {"Edema": 1}), _item(2, None)])
    assert [o.outcome for o in first] == ["ingested", "ingested"]
    changes: collections.Counter = collections.Counter()
    annotation = {"split": "valid", "patient_id": "10000032", "view_group": "lateral",
                  "dataset_study_id": "50414267", "study_uid": "2.25.77",
                  "study_date": dt.date(2180, 5, 6)}  # fmt: skip
    again = store.write_batch(
        "fake:a",
        [_item(1, annotation, {"Edema": 0}), _item(2, None)],
        changes=changes,
    )
    assert [o.outcome for o in again] == ["already-present", "already-present"]
    assert "labels updated" in again[0].detail and "split updated" in again[0].detail
    assert changes == {"labels": 1, "splits": 1, "metadata": 1, "unchanged": 1}
    frame = store.dataset_frame()
    row = frame.loc[first[0].image_id]
    assert (row["split"], row["patient_id"], row["view_group"], row["study_id"]) == (
        "valid", "10000032", "lateral", "50414267",
    )  # fmt: skip
    assert row["Edema"] == 0.0
    assert store.image_by_id(first[0].image_id).study_uid == "2.25.77"  # moved to its study
    assert store.image_by_id(first[0].image_id).study_date == dt.date(2180, 5, 6)
    same: collections.Counter = collections.Counter()
    store.write_batch("fake:a", [_item(1, annotation, {"Edema": 0})], changes=same)
    assert same == {"unchanged": 1}
    assert store.put_reports({"50414267": ("Small effusion.", "a.txt")}) == {
        "new": 1, "changed": 0, "unchanged": 0,
    }  # fmt: skip
    assert store.put_reports({"50414267": ("Small effusion.", "a.txt")})["unchanged"] == 1
    assert store.put_reports({"50414267": ("Large effusion.", "b.txt")})["changed"] == 1
    assert store.report_for_image(first[0].image_id) == "Large effusion."
    assert store.report_for_image(first[1].image_id) is None
    both = [first[1].image_id, first[0].image_id]
    assert store.reports_for_images(both) == {
        first[0].image_id: "Large effusion.", first[1].image_id: None,
    }  # fmt: skip
    assert store.report_texts() == [("50414267", "Large effusion.")]
    with pytest.raises(ValueError, match="unknown image columns"):
        store.write_batch("fake:a", [_item(1, {"pixel_sha256": "x"})])
    assert store.integrity_check() == []


def test_annotations_and_reports_on_sqlite(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        check_annotations(store)


@pytest.mark.service
def test_annotations_and_reports_on_postgresql(postgres_url):
    with open_store(postgres_url) as store:
        check_annotations(store)
