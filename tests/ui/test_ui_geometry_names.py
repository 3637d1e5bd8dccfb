"""The UI accepts every geometry name search accepts (issue 13: it refused posterior_gaussian)."""

from __future__ import annotations

import pytest
from ui_fakes import make_service

from chexretrieve.ui.handlers import CaseLookup, SearchSettings


@pytest.mark.parametrize("spelling", ["posterior_gaussian", "gaussian_posterior"])
def test_ui_search_accepts_both_posterior_spellings(tmp_path, spelling):
    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32)
    query = lookup.load_case(3)
    ranking = lookup.search(query, SearchSettings("Pleural Effusion", spelling, top_k=5))
    assert ranking.result.geometry == "gaussian_posterior"
    assert len(ranking.image_ids) == 5


def test_ui_search_refuses_an_unknown_geometry_with_the_list(tmp_path):
    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32)
    query = lookup.load_case(3)
    with pytest.raises(ValueError, match="unknown geometry 'euclid'; choose one of: cosine"):
        lookup.search(query, SearchSettings("Pleural Effusion", "euclid"))
