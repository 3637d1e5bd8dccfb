"""The case picker (find by case id / accession prefix, label status, paging) and thumbnails."""

from __future__ import annotations

import pytest
from case_picker_checks import check_case_picker

from chexretrieve.store import Thumbnail


def test_case_picker_and_thumbnails_on_sqlite(store):
    check_case_picker(store)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": "positive"}, "needs a finding"),
        ({"finding": "Edema", "status": "maybe"}, "must be one of positive, negative"),
        ({"finding": "Broken Heart", "status": "positive"}, "Broken Heart"),
        ({"offset": -1}, "offset must be 0 or more"),
        ({"limit": 0}, "limit must be between 1 and 1000"),
        ({"limit": 5000}, "limit must be between 1 and 1000"),
    ],
)
def test_bad_case_queries_say_what_is_wrong(store, kwargs, message):
    with pytest.raises(ValueError, match=message):
        store.find_cases(**kwargs)


def test_a_thumbnail_must_be_a_png(store):
    with pytest.raises(ValueError, match="must be PNG bytes"):
        store.put_thumbnails({1: Thumbnail(b"GIF89a not a png", 8)})
