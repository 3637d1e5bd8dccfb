"""Gradio glue shared by the tabs: error messages, the audit user name, private endpoints."""

from __future__ import annotations

import functools
import logging

import gradio as gr

from chexretrieve.ui.render import esc

#: keyword arguments of every event listener: no API endpoint for it (hidden from the API page,
#: and no name: Gradio calls it "false", "false_1", ...; the REST routes that would take a name
#: are refused anyway by chexretrieve.ui.access.AccessGuard, only the page's queue reaches it)
PRIVATE = {"api_visibility": "private", "api_name": False}
#: what the page says when an action failed in a way no user input explains (logged in full)
INTERNAL_ERROR = "the server could not finish this action (the error was logged); try again"

log = logging.getLogger("chexretrieve.ui")


def fail(exc: Exception) -> gr.Error:
    """A Gradio error toast whose text is escaped (messages may quote file content)."""
    return gr.Error(esc(str(exc)), print_exception=False)


def who(request: gr.Request | None) -> str:
    """For the audit trail: the signed-in user, else 'anonymous@<client address>'."""
    if request is None:
        return "anonymous"
    if getattr(request, "username", None):
        return str(request.username)
    client = getattr(request, "client", None)
    return f"anonymous@{getattr(client, 'host', None) or 'unknown'}"


def is_skip(value) -> bool:
    """Whether an event output is ``gr.skip()`` (the component keeps what it shows)."""
    return isinstance(value, dict) and value == gr.skip()


def attempt(action, on_error):
    """``action()``; on a ValueError (bad input, unreadable file) ``on_error(its text)``, on any
    other exception ``on_error(INTERNAL_ERROR)`` after logging it: a message on the page instead
    of Gradio's error badges, so every widget stays where it was."""
    try:
        return action()
    except ValueError as exc:
        return on_error(str(exc))
    except Exception:  # noqa: BLE001 - the page must survive any failure
        log.exception("case lookup action failed")
        return on_error(INTERNAL_ERROR)


def user_errors(fn):
    """Turn ValueError (bad input, unreadable file) into an escaped error toast."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise fail(exc) from None

    return wrapper
