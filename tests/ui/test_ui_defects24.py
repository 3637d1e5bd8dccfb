"""Issue 24's defects at the handler level (no browser)."""

from __future__ import annotations

import pytest

from chexretrieve.ui.handlers import parse_filters
from chexretrieve.ui.upload_guard import refused_upload_message, upload_guard_js


def _filters(age_min=0, age_max=120, date_from=""):
    return parse_filters([], "any", age_min, age_max, date_from, "", False)


def test_ages_outside_the_range_are_refused_with_the_range_and_the_value() -> None:
    with pytest.raises(ValueError, match=r"'age from' must be between 0 and 120 years, not 150"):
        _filters(age_min=150)
    with pytest.raises(ValueError, match=r"'age to' must be between 0 and 120 years, not -3"):
        _filters(age_max=-3)
    with pytest.raises(ValueError, match="number of years"):
        _filters(age_min="old")
    f = _filters(age_min=30, age_max=120)
    assert (f.age_min, f.age_max) == (30.0, None)  # the range's end means no bound


def test_an_upload_refused_in_the_browser_is_named_with_its_size_and_the_cap() -> None:
    text = refused_upload_message({"name": "big.dcm", "size": 60 * 1024 * 1024}, 50)
    assert text.startswith("The uploaded file 'big.dcm' is larger than the server reads")
    assert "60.0 MiB; uploads are at most 50 MiB" in text and "Nothing was searched" in text
    assert "archive" not in text
    js = upload_guard_js("upload", 50)
    assert str(50 * 1024 * 1024) in js and "#upload" in js and "@" not in js
