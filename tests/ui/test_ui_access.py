"""The route guard's allow-list and the role checks of chexretrieve.ui.access (no server)."""

from __future__ import annotations

import pytest

from chexretrieve.accounts import AccessRefused
from chexretrieve.ui.access import AccessControl, route_allowed
from chexretrieve.ui.input_limits import bounded_number, capped

PAGE = ["/", "/config", "/login", "/logout", "/assets/index-abc.js", "/static/img/x.svg",
        "/gradio_api/queue/join", "/gradio_api/queue/data", "/gradio_api/heartbeat/abc123",
        "/gradio_api/upload", "/gradio_api/startup-events", "/theme.css",
        "/favicon.ico"]  # fmt: skip
REFUSED = ["/gradio_api/run/save_version", "/gradio_api/call/load_case", "/gradio_api/api/x",
           "/gradio_api/call/v2/x", "/run/predict", "/api/predict", "/gradio_api/info",
           "/gradio_api/openapi.json", "/openapi.json", "/gradio_api/file=/etc/passwd",
           "/gradio_api/file/tmp/x.png", "/gradio_api/proxy=http://x", "/monitoring",
           "/gradio_api/mcp/sse", "/gradio_api/dev/reload", "/gradio_api/runs",
           "/assets/../../etc/passwd", "/assets/%2e%2e/%2e%2e/etc/passwd", "//config",
           "/gradio_api/queue/join/../../run/x", "/docs", "/gradio_api/vibe-edit",
           "/gradio_api/component_server", "/gradio_api/stream/abc"]  # fmt: skip


@pytest.mark.parametrize("path", PAGE)
def test_the_page_routes_are_allowed(path):
    assert route_allowed(path)


@pytest.mark.parametrize("path", REFUSED)
def test_every_other_route_is_refused(path):
    assert not route_allowed(path)


class _Request:
    def __init__(self, username):  # noqa: ANN001
        self.username = username


class _Book:
    def __init__(self, roles: dict) -> None:
        self.roles = roles

    def active_role(self, name):  # noqa: ANN001, ANN201
        return self.roles.get(name)


def test_roles_are_read_from_the_request_user_on_the_server():
    access = AccessControl("accounts", _Book({"ana": "radiologist", "cy": "curator"}))
    assert access.require(_Request("cy"), "edit_anchor_sets") == "cy"
    with pytest.raises(AccessRefused, match="needs the curator role; ana is signed in as radiolog"):
        access.require(_Request("ana"), "edit_anchor_sets")
    with pytest.raises(AccessRefused, match="zed has no active account"):
        access.require(_Request("zed"), "search")
    with pytest.raises(AccessRefused, match="you are not signed in"):
        access.require(_Request(None), "search")
    local = AccessControl()  # no sign-in: the operator at the machine, a curator
    assert local.require(_Request(None), "edit_anchor_sets") is None
    with pytest.raises(AccessRefused):
        local.require(_Request(None), "manage_accounts")


@pytest.mark.parametrize(
    ("value", "message"),
    [(float("nan"), "not NaN"), (float("inf"), "not infinity"), (-1, "not -1"),
     (10**400, "too large"), ("12 years", "must be a number"), (True, "must be a number")],
)  # fmt: skip
def test_numbers_are_checked_with_clear_messages(value, message):
    with pytest.raises(ValueError, match=message):
        bounded_number(value, "age", 0, 120)


def test_numbers_and_texts_within_the_limits_pass():
    assert bounded_number("42", "age", 0, 120) == 42.0
    assert bounded_number(None, "age", 0, 120) is None and bounded_number(" ", "a", 0, 1) is None
    assert capped("x" * 64, "id", 64) == "x" * 64 and capped(None, "id", 64) == ""
    with pytest.raises(ValueError, match="is 65 characters long; at most 64"):
        capped("x" * 65, "id", 64)


def test_the_event_queue_keeps_no_per_event_monitoring_summary(monkeypatch):
    """Gradio rebuilds a pandas summary of its last 10,000 events after every event unless told
    otherwise; the served queue never rebuilds it and keeps few records. An operator's own
    setting wins."""
    import gradio as gr
    from gradio import queueing

    from chexretrieve.ui.app import QUIET_QUEUE_ENV, bounded_queue

    for name in QUIET_QUEUE_ENV:
        monkeypatch.delenv(name, raising=False)
    with gr.Blocks() as app:
        gr.Markdown("x")
    bounded_queue(app, 7)
    queue = app._queue
    assert queue.max_size == 7
    assert queue.ANALYTICS_MAX_EVENTS == 100 and queue.ANAYLTICS_CACHE_FREQUENCY >= 10**9
    monkeypatch.setattr(queueing.Queue, "_get_df", lambda *a: pytest.fail("summary rebuilt"))
    records = [{"function": "search", "status": "success", "process_time": 0.1}] * 5000
    for _ in range(50):  # fifty events served: the summary is the cached one each time
        queue.events_recorded += 1
        assert queue.compute_analytics_summary(records) == {"functions": {}}
    monkeypatch.setenv("GRADIO_ANALYTICS_MAX_EVENTS", "5000")
    with gr.Blocks() as other:
        gr.Markdown("y")
    bounded_queue(other, 7)
    assert other._queue.ANALYTICS_MAX_EVENTS == 5000
