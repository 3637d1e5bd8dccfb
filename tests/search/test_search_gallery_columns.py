"""Gallery column reads used per search (GalleryColumns) against plain pandas references."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest

from chexretrieve.findings import FINDINGS
from chexretrieve.search.gallery import Gallery, GalleryColumns, SearchFilters, filter_mask


def _mixed_frame(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "float": np.where(rng.random(n) < 0.3, np.nan, rng.random(n)),
            "int": np.arange(n),
            "bool": rng.random(n) < 0.5,
            "date": [
                dt.date(2020, 1, 1) + dt.timedelta(days=i) if i % 7 else None for i in range(n)
            ],
            "text": [f"x{i}" if i % 5 else None for i in range(n)],
            "timestamp": pd.date_range("2020-01-01", periods=n),
            "nullable": pd.array([i if i % 3 else None for i in range(n)], dtype="Int64"),
            "category": pd.Categorical(["a", "b"] * (n // 2)),
            "object": pd.Series([1, "a", 2.5, np.float32(3), None] * (n // 5), dtype=object),
        },
        index=np.arange(100, 100 + n),
    )


def _same_cell(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_records_equal_pandas_to_dict_records_values_and_types():
    frame = _mixed_frame()
    columns = GalleryColumns(frame, frame)
    for rows in ([3, 0, 59, 7, 10], [], list(range(60))):
        fast = columns.records("metadata", rows)
        reference = frame.iloc[rows].to_dict("records")
        assert len(fast) == len(reference)
        for got, want in zip(fast, reference, strict=True):
            assert list(got) == list(want)
            for name in want:
                assert _same_cell(got[name], want[name]), (name, got[name], want[name])


def _gallery(n: int = 400) -> Gallery:
    rng = np.random.default_rng(3)
    ids = np.arange(1, n + 1, dtype=np.int64)
    views = rng.choice(["PA", "ap", "AP", "LL", None], n)
    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.{i // 3}" if i % 11 else None for i in range(n)],
            "view_position": views,
            "patient_sex": rng.choice(["M", "F", "O", None], n),
            "patient_age_years": np.where(rng.random(n) < 0.1, np.nan, rng.integers(1, 99, n)),
            "study_date": [
                dt.date(2015, 1, 1) + dt.timedelta(days=int(d)) if d % 13 else None
                for d in rng.integers(0, 3000, n)
            ],
            "split": "train",
            "pixel_sha256": [f"h{i % 50}" if i % 9 else None for i in range(n)],
        },
        index=ids,
    )
    labels = pd.DataFrame(
        rng.choice([1.0, 0.0, -1.0, np.nan], size=(n, len(FINDINGS))),
        columns=list(FINDINGS),
        index=ids,
    )
    emb = rng.standard_normal((n, 8)).astype(np.float32)
    return Gallery("t:1", ids, emb / np.linalg.norm(emb, axis=1, keepdims=True), meta, labels)


def _reference_mask(gallery: Gallery, filters: SearchFilters, finding: str) -> np.ndarray:
    """The filters in plain pandas, one comparison per row."""
    meta = gallery.metadata
    mask = np.ones(len(gallery), dtype=bool)
    if filters.views:
        wanted = {v.upper() for v in filters.views}
        mask &= meta["view_position"].fillna("").str.upper().isin(wanted).to_numpy()
    if filters.sex:
        mask &= (meta["patient_sex"] == filters.sex).to_numpy()
    age = pd.to_numeric(meta["patient_age_years"], errors="coerce").to_numpy(dtype=float)
    if filters.age_min is not None:
        mask &= age >= filters.age_min
    if filters.age_max is not None:
        mask &= age <= filters.age_max
    dates = pd.to_datetime(meta["study_date"], errors="coerce")
    if filters.date_from:
        mask &= (dates >= pd.Timestamp(filters.date_from)).to_numpy()
    if filters.date_to:
        mask &= (dates <= pd.Timestamp(filters.date_to)).to_numpy()
    if filters.label_known:
        mask &= gallery.labels[finding].notna().to_numpy()
    return mask


@pytest.mark.parametrize(
    "filters",
    [
        SearchFilters(),
        SearchFilters(views=("PA",)),
        SearchFilters(views=("ap", "LL", "XX")),
        SearchFilters(sex="M"),
        SearchFilters(sex="O", age_min=30),
        SearchFilters(age_min=20, age_max=60),
        SearchFilters(date_from=dt.date(2016, 1, 1), date_to=dt.date(2019, 6, 30)),
        SearchFilters(views=("AP",), sex="F", age_max=70, label_known=True),
    ],
)
def test_filter_mask_matches_a_pandas_reference(filters):
    gallery = _gallery()
    for _ in range(2):  # the second call reads the prepared columns
        expected = _reference_mask(gallery, filters, "Edema")
        assert np.array_equal(filter_mask(gallery, filters, "Edema"), expected)


def test_not_equal_matches_pandas_comparison():
    gallery = _gallery()
    for column in ("study_uid", "pixel_sha256"):
        for value in ("1.2.5", "h7", "absent"):
            expected = (gallery.metadata[column] != value).to_numpy()
            assert np.array_equal(gallery.columns.not_equal(column, value), expected)


@pytest.mark.parametrize("order", ["sorted", "shuffled", "repeated"])
def test_row_of_matches_a_dict_of_the_ids(order):
    """Gallery.row_of / `in` by binary search equal a {id: row} dict (last row wins)."""
    gallery = _gallery(50)
    ids = np.arange(10, 60, dtype=np.int64) * 3
    if order == "shuffled":
        ids = np.random.default_rng(2).permutation(ids)
    elif order == "repeated":
        ids[[4, 30]] = ids[17]
    other = Gallery(
        "t:1", ids, gallery.embeddings, gallery.metadata.set_axis(ids), gallery.labels.set_axis(ids)
    )
    reference = {int(i): row for row, i in enumerate(ids)}
    for candidate in [*ids.tolist(), 0, 31, 10**20, -5, np.int64(ids[3]), "12", "x", None, 2.0]:
        try:
            expected = reference.get(int(candidate))
        except (TypeError, ValueError):
            expected = None
        assert (candidate in other) == (expected is not None)
        if expected is None:
            with pytest.raises(ValueError, match="not in the archive"):
                other.row_of(candidate)
        else:
            assert other.row_of(candidate) == expected
