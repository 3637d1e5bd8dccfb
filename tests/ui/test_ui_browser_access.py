"""Signed-in people in a real browser: who is signed in is shown, and what their role may not do
is disabled on the page (the server refuses it anyway: tests/adversarial/test_adv_access.py)."""

from __future__ import annotations

import pytest
import test_ui_browser as base
from test_ui_browser import CASE_ID, TIMEOUT_MS, _launch, _wait_text

world, browser = base.world, base.browser

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
USERS = [("rita", "radiologist", "rita-password-long"), ("carl", "curator", "carl-password-long")]


def test_the_page_names_the_user_and_disables_what_the_role_may_not_do(world, browser):
    app, url = _launch(world, users=USERS)
    try:
        for name, role, password in USERS:
            # the smaller of the two window sizes: the reason must be on screen without scrolling
            context = browser.new_context(viewport={"width": 1280, "height": 720})
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            page.fill("input[type=text]", name)
            page.fill("input[type=password]", password)
            page.click("button:has-text('Login')")
            page.wait_for_selector(CASE_ID)
            bar = _wait_text(page, "#account-bar", "Signed in as")
            assert f"Signed in as {name} · {role} · Sign out · Sign out everywhere" in bar
            page.get_by_role("tab", name="Curation").click()
            _wait_text(page, "#cur-table", "@1")  # the curation tab's page load has run
            edit = "#cur-edit textarea"
            if role == "radiologist":
                note = _wait_text(page, "#cur-role-note", "needs the curator role")
                assert "you are signed in as radiologist" in note
                for button in ("#cur-save", "#cur-publish", "#cur-revert"):
                    page.wait_for_function(f"() => document.querySelector('{button}').disabled")
                # issue 34, item 7: the reason is above the fold at 1280x720, and the edit boxes
                # take no typing (they were editable, the reason below the fold)
                box = page.locator("#cur-role-note .cx-message").bounding_box()
                assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720
                page.wait_for_function(f"() => document.querySelector('{edit}').disabled")
                before = page.input_value(edit)
                page.locator(edit).click(force=True)
                page.keyboard.type("+ typed by a radiologist")
                assert page.input_value(edit) == before
                assert page.locator("#cur-desc textarea, #cur-desc input").is_disabled()
            else:
                for button in ("#cur-save", "#cur-publish", "#cur-revert"):
                    assert not page.locator(button).is_disabled()
                assert not page.locator(edit).is_disabled()
                assert "needs the curator role" not in page.inner_text("#cur-role-note")
            # one link ends this session, the other every session of the user (issue 33)
            link = "Sign out" if role == "radiologist" else "Sign out everywhere"
            page.get_by_text(link, exact=True).click()
            page.wait_for_selector("input[type=password]")
            context.close()
    finally:
        app.close(verbose=False)
