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
