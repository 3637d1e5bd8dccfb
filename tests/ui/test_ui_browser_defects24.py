"""Issue 24's "other defects" in a real browser (headless Chromium, Playwright).

The archive, the server and the page are test_ui_browser.py's (imported fixtures: one archive,
one server per module). Each ``test_defect_N_...`` fails on the code before the fix.
"""

from __future__ import annotations

import pytest
import test_ui_browser as base
from test_ui_browser import (
    BADGES,
    CASE_ID,
    MESSAGE,
    _load_case,
    _result_ids,
    _results_html,
    _shot,
    _wait_results_change,
    _wait_text,
)

# the shared archive, server and page (fixtures of test_ui_browser.py, one set per module)
world, served, server, browser = base.world, base.served, base.server, base.browser
shared_page, page = base.shared_page, base.page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]


def _no_badges(page) -> None:
    assert page.locator(BADGES).count() == 0, "a Gradio error badge or toast is shown"


def _upload_refused(page, path, needle: str) -> str:
    ids = _result_ids(page)
    page.set_input_files("#upload input[type=file]", str(path))
    text = _wait_text(page, MESSAGE, needle)
    page.wait_for_function(
        "() => !document.querySelector('#upload [data-testid=status-tracker]:not(.hide)')"
    )
    _no_badges(page)
    assert page.locator("#upload input[type=file]").count() == 1  # the drop zone is still there
    assert _result_ids(page) == ids  # the previous results are kept
    return text


def test_defect_7_bad_uploads_are_messages_that_stay_and_keep_the_results(page, world):
    _load_case(page, 5)
    notes = world["root"] / "notes.txt"
    notes.write_text("meeting notes\n", encoding="utf-8")
    text = _upload_refused(page, notes, "notes.txt")
    assert "'notes.txt' is not a DICOM, PNG or JPEG image" in text
    assert "archive" not in text
    big = world["root"] / "big.dcm"
    with open(big, "wb") as out:
        out.truncate(60 * 1024 * 1024)
    text = _upload_refused(page, big, "big.dcm")
    assert "larger than" in text and "50 MiB" in text
    # the message is not a toast: it is still there after a while of other page activity
    page.click("#filters button.label-wrap")
    page.click("#filters button.label-wrap")
    assert "big.dcm" in page.inner_text(MESSAGE)
    _shot(page, "24-07-upload-refused")


def test_defect_7_an_out_of_range_age_is_a_message_and_the_results_stay(page):
    _load_case(page, 5)
    ids = _result_ids(page)
    page.click("#filters button.label-wrap")
    page.fill("#f-age-min input", "150")
    page.click("#search")
    text = _wait_text(page, MESSAGE, "age")
    assert "between 0 and 120" in text and "150" in text
    _no_badges(page)
    assert page.locator("#results [data-testid=status-tracker] .error").count() == 0
    assert _result_ids(page) == ids  # the previous results are kept
    assert "previous" in text  # and the message says that the results shown are the old ones
    page.fill("#f-age-min input", "0")
    page.fill("#f-date-from input, #f-date-from textarea", "2024-13-45")
    page.click("#search")
    text = _wait_text(page, MESSAGE, "date")
    assert "'date from' must be a date like 2024-03-31" in text
    _no_badges(page)
    assert _result_ids(page) == ids
    page.fill("#f-date-from input, #f-date-from textarea", "")
    before = _results_html(page)
    page.click("#search")
    _wait_results_change(page, before)
    assert _result_ids(page) == ids
    page.click("#filters button.label-wrap")
    assert page.input_value(CASE_ID) == "5"


def test_defect_2_a_png_or_jpeg_of_an_archived_case_never_returns_it(page, world, served):
    from PIL import Image

    from chexretrieve.dicom import read_radiograph, render_for_display

    source = served["lookup"].gallery.metadata.loc[12, "source_path"]
    shown = Image.fromarray(render_for_display(read_radiograph(source)))
    for name, image, options in (
        ("case12.png", shown, {}),
        ("case12.jpg", shown, {"quality": 75}),
        ("case12-96.png", shown.resize((96, 96), Image.Resampling.LANCZOS), {}),
    ):
        path = world["root"] / name
        image.save(path, **options)
        before = _results_html(page)
        page.set_input_files("#upload input[type=file]", str(path))
        _wait_results_change(page, before)
        ids = _result_ids(page)
        assert len(ids) == 12 and 12 not in ids, name


def test_defect_6_cosine_note_goes_away_not_relevant_leaves_and_free_text_is_named(page):
    from test_ui_browser import _choose, _open_result

    _load_case(page, 5)
    before = _results_html(page)
    _choose(page, "#geometry", "Cosine (no anchors)")
    _wait_results_change(page, before)
    assert "Cosine ignores the finding" in page.inner_text("#anchor-set")
    before = _results_html(page)
    _choose(page, "#geometry", "Softmax")
    _wait_results_change(page, before)
    page.wait_for_function("() => !document.querySelector('#anchor-set input').disabled")
    assert "Cosine ignores" not in page.inner_text("#anchor-set")  # no stale note
    assert "Cosine ignores" not in page.inner_text("#finding")

    ids = _result_ids(page)
    marked = _open_result(page, 2)
    assert marked == ids[1]
    before = _results_html(page)
    page.click("#viewer-mark-nonrel")
    _wait_results_change(page, before)
    after = _result_ids(page)
    assert marked not in after and len(after) == len(ids)  # gone, not only moved down
    assert "leaves the results" in page.inner_text("#feedback")
    page.keyboard.press("Escape")
    before = _results_html(page)
    page.click("#clear-fb")
    _wait_results_change(page, before)
    assert _result_ids(page) == ids

    page.fill("#free-text input, #free-text textarea", "small left effusion")
    before = _results_html(page)
    page.click("#search")
    _wait_results_change(page, before)
    assert "free text “small left effusion”" in page.inner_text("#results .cx-results-title")
    page.fill("#free-text input, #free-text textarea", "")


def test_defect_11_one_label_word_one_query_heading_result_details_and_a_viewer_that_stays(
    page, served
):
    from test_ui_browser import _close_viewer, _open_options, _open_result

    lookup = served["lookup"]
    labels = lookup.gallery.labels
    missing = [int(i) for i in labels.index if labels.loc[i].isna().any()]
    assert missing
    words = ("positive", "negative", "uncertain", "not mentioned")
    # the picker's status filter and its case labels use the same word
    page.click("#browse button.label-wrap, #browse > button")
    options = _open_options(page, "#pick-status")
    page.keyboard.press("Escape")
    assert "not mentioned" in options and "blank" not in options
    # the query's chips and the results' column
    _load_case(page, missing[0])
    info = page.inner_text("#query-info")
    assert "unknown" not in info
    column = [row.split("\t") for row in page.inner_text("#results tbody").splitlines()]
    assert all(("unknown" not in " ".join(r)) for r in column)
    assert {c.inner_text() for c in page.locator("#results .cx-label").all()} <= set(words)

    # the viewer: each side once, the result with its details table
    case_id = _open_result(page, 1)
    details = page.inner_text("#viewer-details")
    assert details.count(f"Query: case {missing[0]}") == 1
    assert "Query · case" not in details
    assert f"Result: case {case_id}" in details
    table = page.locator("#viewer-details .cx-details").nth(1).inner_text()
    assert "View" in table and "Study date" in table
    _close_viewer(page)

    # the viewer of the query alone offers no "Relevant ✓" that would mark (or close) anything
    page.click("#open-query")
    page.wait_for_selector("#viewer .cx-pane[data-side='query'] .cx-view-img")
    page.wait_for_selector("#viewer-mark-rel", state="hidden")
    assert not page.locator("#viewer-mark-nonrel").is_visible()
    assert page.locator("#viewer").is_visible()
    _close_viewer(page)
    _open_result(page, 2)  # a result again: the buttons are back
    assert page.locator("#viewer-mark-rel").is_visible()
    _close_viewer(page)


def test_defect_8_tab_closes_dropdowns_back_closes_the_viewer_and_the_url_keeps_the_search(
    page, server
):
    from test_ui_browser import _choose, _open_result

    # Tab through Finding, Anchor set and Geometry: no list is left open
    page.click("#finding input")
    page.wait_for_selector("#finding li[role='option']")
    for _ in range(3):
        page.keyboard.press("Tab")
    page.wait_for_function(
        "() => document.activeElement.tagName === 'TEXTAREA'"
        " && !document.querySelector('ul[role=listbox]')"
        " && !document.querySelector('input[role=combobox][aria-expanded=true]')"
    )  # on the old page three lists stayed open: this wait timed out

    # the search is in the address: case, finding, geometry and filters
    _load_case(page, 7)
    before = _results_html(page)
    _choose(page, "#geometry", "Gaussian")
    _wait_results_change(page, before)
    page.click("#filters button.label-wrap")
    page.get_by_label("AP", exact=True).check()
    before = _results_html(page)
    page.click("#search")
    _wait_results_change(page, before)
    page.wait_for_function("() => location.search.includes('view=AP')")
    url = page.url
    assert "case=7" in url and "geometry=gaussian" in url and "finding=Pleural+Effusion" in url
    assert "set=" not in url  # the latest set is the default, not pinned in the address
    shown = _result_ids(page)

    # Back with the viewer open closes the viewer and stays in the app
    _open_result(page, 1)
    page.go_back()
    page.wait_for_selector("#viewer", state="hidden")
    assert page.url == url

    # a refresh restores the query, the settings, the filters and the results
    page.reload()
    page.wait_for_selector("#results .cx-results[data-serial] .cx-card")
    assert page.input_value(CASE_ID) == "7"
    assert "Gaussian" in page.inner_text("#results .cx-results-title")
    assert "query: case 7" in page.inner_text("#results .cx-results-title")
    assert _result_ids(page) == shown
    page.click("#filters button.label-wrap")
    assert page.get_by_label("AP", exact=True).is_checked()

    # a link to a case and a finding
    page.goto(server + "?case=9&finding=Edema")
    page.wait_for_selector("#results .cx-results[data-serial] .cx-card")
    title = page.inner_text("#results .cx-results-title")
    assert title.startswith("Edema") and "query: case 9" in title
    assert page.input_value("#anchor-set input").startswith("edema.")
    page.goto(server)  # leave the shared page as the other tests expect it
    page.wait_for_selector(CASE_ID)


def test_defect_3_draft_impact_with_an_interval_publish_and_revert(page, world):
    from chexretrieve.anchors import latest_anchor_set

    page.get_by_role("tab", name="Curation").click()
    page.wait_for_selector("#cur-table table")
    from test_ui_browser import _choose as _choose_cur

    _choose_cur(page, "#cur-finding", "Lung Opacity")
    page.wait_for_function(
        "() => document.querySelector('#cur-table').innerText.includes('lung_opacity.a@1')"
    )
    latest = latest_anchor_set("Lung Opacity", root=world["anchors"]).key
    text = page.input_value("#cur-edit textarea")
    page.fill("#cur-edit textarea", text + "\n+ The patient likes pizza.")
    page.click("#cur-save")
    status = _wait_text(page, "#cur-status", "Draft of")
    assert "edited from lung_opacity.a@1" in status and "pizza" in status  # flagged off-topic
    assert latest_anchor_set("Lung Opacity", root=world["anchors"]).key == latest  # not published
    page.click("#cur-impact")  # an unpublished edit is measured against its base
    impact = _wait_text(page, "#cur-impact-report", "AUPRC")
    assert "lung_opacity.a@1 → the edit of lung_opacity.a@1" in impact and "95 % interval" in impact
    page.click("#cur-publish")
    assert "not published" in _wait_text(page, "#cur-status", "not published")
    assert latest_anchor_set("Lung Opacity", root=world["anchors"]).key == latest
    page.fill("#cur-edit textarea", text + "\n+ Patchy opacity in the left lower zone.")
    page.click("#cur-publish")
    _wait_text(page, "#cur-status", "Published")
    published = latest_anchor_set("Lung Opacity", root=world["anchors"])
    assert (
        published.key != latest and "Patchy opacity in the left lower zone." in published.sentences
    )
    _choose_cur(page, "#cur-set", "lung_opacity.a@1")
    page.click("#cur-revert")
    _wait_text(page, "#cur-status", "Reverted")
    back = latest_anchor_set("Lung Opacity", root=world["anchors"])
    assert back.version == published.version + 1
    assert "Patchy opacity in the left lower zone." not in back.sentences
    assert back.description == "revert to lung_opacity.a@1"
    _shot(page, "24-03-curation-drafts")
    page.get_by_role("tab", name="Case lookup").click()


def test_defect_5_similarity_is_a_measured_chance_and_an_unlike_query_is_flagged(page, world):
    import re

    _load_case(page, 5)
    cells = [
        c.strip()
        for c in page.eval_on_selector_all(
            "#results tbody tr td:nth-child(3)", "cs => cs.map(c => c.innerText)"
        )
    ]
    assert len(cells) == 12 and all(re.fullmatch(r"\d+ % (positive|negative)", c) for c in cells)
    chances = [int(c.split()[0]) for c in cells]
    assert chances == sorted(chances, reverse=True)  # a better rank never reads lower
    assert len(set(chances)) > 1 or chances[0] < 100  # not the 99.6-100 of percentiles
    legend = page.inner_text("#results .cx-legend")
    assert "labelled archived cases" in legend and "For comparison" in legend
    assert page.locator("#results .cx-unlike").count() == 0  # an archived case is like it
    before = _results_html(page)
    page.set_input_files("#upload input[type=file]", str(world["root"] / "hostile.dcm"))
    _wait_results_change(page, before)
    # flagged by the nearest-neighbour rule, or by the archive density's own OOD warning when
    # the archive has a density (the two never both speak)
    flags = page.eval_on_selector_all(
        "#results .cx-unlike, #results #density-flag", "es => es.map(e => e.innerText)"
    )
    assert any("is unlike this archive" in f or f.startswith("Warning") for f in flags), flags
    legend = page.inner_text("#results .cx-legend")  # and no chance under the flag (issue 34)
    assert legend.startswith("No chances are shown: the query is unlike the archive")
