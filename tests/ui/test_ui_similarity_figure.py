"""The number beside each result (issue 34, items 1-2), through the case lookup's handlers: which
chance a query gets, its legend's base rate counted here from the archive's labels, and no chance
for a query unlike the archive."""

from __future__ import annotations

import re

import numpy as np
import pytest
from ui_fakes import make_service, write_png

from chexretrieve.ui.handlers import CaseLookup, SearchSettings
from chexretrieve.ui.similarity_figure import (
    ChanceFigure,
    chance_legend,
    query_status,
    unlike_reason,
)

FINDING = "Pleural Effusion"
CHANCE = re.compile(r"(\d+) % (positive|negative)")


@pytest.fixture
def lookup(tmp_path):
    return CaseLookup(make_service(tmp_path), thumbnail_px=32, case_page_size=10)


def _base_rate(lookup) -> tuple[float, int]:
    """Share positive among the labelled archived cases (0 and not mentioned are negative)."""
    values = list(lookup.gallery.labels[FINDING])
    known = [v for v in values if v != -1]
    return sum(1 for v in known if v == 1) / len(known), len(known)


def _case_with(lookup, label) -> int:
    labels = lookup.gallery.labels[FINDING]
    chosen = labels.isna() if label is None else labels == label
    return int(labels.index[chosen.to_numpy()][0])


def _cells(page) -> list[str]:
    """The similarity column of the results table, as written."""
    return re.findall(r"<td class='cx-num cx-sim[^']*'[^>]*>([^<]*)</td>", page.html)


@pytest.mark.parametrize(("label", "word"), [(1.0, "positive"), (0.0, "negative"),
                                             (None, "negative")])  # fmt: skip
def test_an_archived_query_gets_the_chance_of_its_own_status(lookup, label, word):
    case = _case_with(lookup, label)
    page = lookup.search(lookup.load_case(case), SearchSettings(FINDING, "softmax", top_k=6))
    calibration = lookup.service.rank_calibration(page_request(lookup, case), 6)
    curve = calibration.positive if word == "positive" else calibration.negative
    cells = _cells(page)
    assert len(cells) == 6
    for rank, cell in enumerate(cells, start=1):
        number, status = CHANCE.fullmatch(cell).groups()
        assert status == word and int(number) == round(100 * curve.at(rank))
    p, n = _base_rate(lookup)
    base = p if word == "positive" else 1 - p
    assert f"{100 * base:.0f} % of the {n:,} labelled archived cases are {word}" in page.legend
    assert f"when {curve.n_queries} archived cases {word} for {FINDING}" in page.legend
    assert f"<th>chance {word}</th>" in page.html


def page_request(lookup, case):
    from chexretrieve.search.service import SearchRequest

    return SearchRequest(finding=FINDING, geometry="softmax", case_id=case, top_k=6)


def test_an_upload_gets_the_chance_that_a_result_is_positive_and_no_claim_about_itself(
    lookup, tmp_path
):
    path = tmp_path / "upload.png"
    write_png(path, seed=4)
    page = lookup.search(lookup.load_upload(str(path)), SearchSettings(FINDING, "softmax", top_k=6))
    calibration = lookup.service.rank_calibration(page_request(lookup, 1), 6)
    for rank, cell in enumerate(_cells(page), start=1):
        number, status = CHANCE.fullmatch(cell).groups()
        assert status == "positive"
        assert int(number) == round(100 * calibration.any_query.at(rank))
    assert "It says nothing about the query itself (an upload has no label)" in page.legend
    p, n = _base_rate(lookup)
    assert f"{100 * p:.0f} % of the {n:,} labelled archived cases are positive" in page.legend
    assert "same status" not in page.html


def test_a_query_unlike_the_archive_gets_no_chance_but_the_reason(lookup, tmp_path, monkeypatch):
    path = tmp_path / "noise.png"
    write_png(path, seed=9)
    monkeypatch.setattr(lookup.service, "nearest_cosine", lambda request: -0.5)
    page = lookup.search(lookup.load_upload(str(path)), SearchSettings(FINDING, "softmax", top_k=6))
    assert _cells(page) == ["—"] * 6
    assert "%" not in "".join(re.findall(r"class='cx-sim[^']*'[^>]*>([^<]*)<", page.html))
    assert page.html.count("cx-sim-withheld") == 12  # every card and every row, greyed
    assert "No chances are shown: the query is unlike the archive" in page.legend
    assert "closest archived image has cosine -0.50" in page.legend
    assert "<th>chance (not shown)</th>" in page.html


def test_query_status_reads_labels_as_the_evaluation_does():
    assert query_status({FINDING: 1.0, "Edema": 0.0}, FINDING)[0] == "positive"
    assert query_status({FINDING: 0.0}, FINDING)[0] == "negative"
    assert query_status({FINDING: np.nan, "Edema": 1.0}, FINDING)[0] == "negative"
    assert query_status({FINDING: -1.0}, FINDING) == (
        "unknown",
        f"its {FINDING} label is uncertain",
    )
    assert query_status({FINDING: np.nan, "Edema": None}, FINDING)[0] == "unknown"  # unlabelled
    assert query_status(None, FINDING) == ("unknown", "an upload has no label")


def test_the_density_decides_when_there_is_one_else_the_nearest_neighbour_rule():
    class Density:
        log_density, ood, ood_percentile = -3.0, False, 0.5

    assert unlike_reason(Density(), nearest=0.1, nearest_low=0.9) == ""
    Density.ood = True
    assert "fewer than 0.5 % of archived images" in unlike_reason(Density(), 0.95, 0.9)
    assert unlike_reason(None, 0.95, 0.9) == ""
    assert "cosine 0.10" in unlike_reason(None, 0.1, 0.9)
    assert unlike_reason(None, float("nan"), 0.9) == ""


def test_the_legend_of_an_uncertain_query_names_why_nothing_is_claimed():
    from chexretrieve.search.calibration import StatusCurve

    curve = StatusCurve("positive", (0.4, 0.3), 40, 0.14)
    figure = ChanceFigure(FINDING, "unknown", f"its {FINDING} label is uncertain", curve, 3000)
    text = chance_legend(figure, "Softmax", 2999)
    assert f"nothing about the query itself (its {FINDING} label is uncertain)" in text
    assert "14 % of the 3,000 labelled archived cases are positive" in text
    assert figure.cell(1) == "40 % positive" and figure.cell(3) == "—"


def test_an_unlike_query_gets_no_number_even_where_no_chance_was_measurable():
    from chexretrieve.ui.similarity_figure import make_figure

    assert make_figure(None, FINDING, None, "") is None  # like the archive: percentiles
    figure = make_figure(None, FINDING, None, "its closest archived image has cosine 0.10")
    assert figure is not None and figure.withheld and figure.cell(1) == "—"
    assert figure.heading == "chance (not shown)"
