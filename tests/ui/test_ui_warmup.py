"""The start-up warm-up fits and caches what the first searches need (issue 24, defect 10)."""

from __future__ import annotations

from ui_fakes import make_service

from chexretrieve.search.service import SearchRequest
from chexretrieve.search.warmup import start_warm_up, warm_up

FINDING = "Pleural Effusion"


def test_after_the_warm_up_a_first_search_computes_nothing_new(tmp_path) -> None:
    service = make_service(tmp_path)
    geometries = ["cosine", "softmax", "gaussian", "gaussian_posterior"]
    took = warm_up(service, FINDING, geometries, top_k=5, other_findings=["Edema", FINDING])
    assert set(took) == {(FINDING, g) for g in geometries} | {("Edema", "softmax")}
    computed = service.cache.computed
    calibrations = dict(service._calibrations)
    for geometry in geometries:
        request = SearchRequest(finding=FINDING, geometry=geometry, case_id=3, top_k=5)
        service.search(request)
        service.rank_calibration(request, 5)
    assert service.cache.computed == computed  # every feature block was ready
    assert service._calibrations == calibrations  # and every calibration


def test_the_background_warm_up_stops_when_asked_and_never_raises(tmp_path) -> None:
    service = make_service(tmp_path)
    thread, stop = start_warm_up(service, FINDING, ["softmax", "no-such-geometry"], 5)
    thread.join(timeout=120)
    assert not thread.is_alive()  # the unknown geometry was logged and skipped
    stop.set()
    assert warm_up(service, FINDING, ["softmax"], 5, stop=stop) == {}


def test_the_ui_warm_up_covers_every_geometry_of_the_opening_finding(tmp_path) -> None:
    from chexretrieve.geometry import GEOMETRIES
    from chexretrieve.ui.app import start_ui_warm_up
    from chexretrieve.ui.config import UIConfig
    from chexretrieve.ui.handlers import CaseLookup, SearchSettings

    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32, case_page_size=10)
    thread, _ = start_ui_warm_up(lookup, UIConfig(top_k=5))
    thread.join(timeout=300)
    assert not thread.is_alive()
    service = lookup.service
    computed = service.cache.computed
    query = lookup.load_case(2)
    for geometry in GEOMETRIES:  # the page's first search under any geometry fits nothing
        lookup.search(query, SearchSettings(FINDING, geometry.name, top_k=5))
    assert service.cache.computed == computed
