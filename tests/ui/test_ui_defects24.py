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


def test_the_address_of_a_search_round_trips_through_the_parameters() -> None:
    import datetime as dt
    import urllib.parse

    from chexretrieve.search.gallery import SearchFilters
    from chexretrieve.ui.handlers import QueryImage, SearchSettings
    from chexretrieve.ui.url_state import search_url, settings_from_url, with_url

    query = QueryImage(source="case", name="case 7", pixels=None, metadata={}, case_id=7)
    settings = SearchSettings(
        finding="Pleural Effusion", geometry="gaussian", anchor_set="pleural_effusion.b@2",
        filters=SearchFilters(views=("AP", "PA"), sex="F", age_min=30, date_to=dt.date(2024, 3, 1),
                              label_known=True),
        text="small left effusion & more",
    )  # fmt: skip
    url = search_url(query, settings)
    assert "set=" not in search_url(query, settings, latest_set="pleural_effusion.b@2")
    params = urllib.parse.parse_qs(url[1:])
    back = settings_from_url(params)
    assert back.case == "7" and back.finding == "Pleural Effusion" and back.geometry == "gaussian"
    assert back.anchor_set == "pleural_effusion.b@2" and back.text == "small left effusion & more"
    assert back.views == ("AP", "PA") and back.sex == "F" and back.age_min == 30.0
    assert back.age_max is None and back.date_to == "2024-03-01" and back.label_known is True
    upload = QueryImage(source="upload", name="the uploaded image", pixels=None, metadata={})
    assert "case=" not in search_url(upload, settings)  # an upload never enters the address
    assert settings_from_url({}).empty and settings_from_url(None).empty
    html = with_url("<div class='cx-results' data-serial='3'>x</div>", "?a='b'")
    assert html.startswith("<div class='cx-results' data-url='?a=%27b%27' data-serial='3'>")
    # the archive-density notice comes before the results: the address still reaches them
    notice = "<div class='cx-message' role='status'>unlike the archive</div>"
    html = with_url(notice + "<div class='cx-results' data-serial='4'>x</div>", "?c=1")
    assert html == notice + "<div class='cx-results' data-url='?c=1' data-serial='4'>x</div>"


def test_the_gaussian_explanation_splits_its_own_distance_exactly() -> None:
    import numpy as np

    from chexretrieve.search.explain import explain_gaussian_pair

    rng = np.random.default_rng(2)
    anchors = rng.standard_normal((9, 6))
    anchors /= np.linalg.norm(anchors, axis=1, keepdims=True)
    q, r = (v / np.linalg.norm(v) for v in rng.standard_normal((2, 6)))
    inv_t = 7.0
    sentences = [f"s{i}" for i in range(9)]
    found = explain_gaussian_pair(q, r, anchors, sentences, inv_t, top=9)
    mu = anchors.mean(axis=0)
    sigma = sum(np.outer(a - mu, a - mu) for a in anchors) / len(anchors)  # 1/N covariance
    naive = inv_t**2 / 2 * (q - r) @ sigma @ (q - r)
    assert found.divergence == pytest.approx(naive)
    assert sum(t.divergence_term for t in found.differing) == pytest.approx(naive)
    assert found.method == "gaussian" and not found.approximate


def test_explanations_keep_to_the_query_side_and_say_their_terms(tmp_path) -> None:
    import dataclasses

    from ui_fakes import make_service

    from chexretrieve.search.explain import AnchorTerm, Explanation, without_other_side
    from chexretrieve.ui.handlers import CaseLookup, SearchSettings, report_side

    assert report_side("Small left pleural effusion. Right lung clear.", "Pleural Effusion") == (
        "left"
    )
    assert report_side("Bilateral pleural effusions.", "Pleural Effusion") is None
    assert report_side(None, "Pleural Effusion") is None
    terms = tuple(
        AnchorTerm(text, 0.1, 0.1, 0.1)
        for text in ("Blunting of the right costophrenic angle.", "Small left effusion.",
                     "Effusions on both sides.", "No effusion.")
    )  # fmt: skip
    kept = without_other_side(Explanation(terms, terms, 0.4), "left", 3)
    assert [t.sentence for t in kept.shared] == [
        "Small left effusion.", "Effusions on both sides.", "No effusion.",
    ]  # fmt: skip
    assert kept.left_out_side == "right"

    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32, case_page_size=10)
    query = dataclasses.replace(lookup.load_case(1), report="Small left pleural effusion.")
    gaussian = lookup.explain(query, SearchSettings("Pleural Effusion", "gaussian"), 12)
    assert "Gaussian geometry" in gaussian and "Mahalanobis" in gaussian
    assert "symmetrised" not in gaussian and "KL" not in gaussian
    assert "Approximate" not in gaussian
    latent = lookup.explain(query, SearchSettings("Pleural Effusion", "latent_gaussian"), 12)
    assert "Approximate" in latent
    softmax = lookup.explain(query, SearchSettings("Pleural Effusion", "softmax"), 12)
    assert "Approximate" not in softmax and "softmax profile" in softmax
