"""Gradio glue shared by the tabs: error messages, the audit user name, private endpoints."""

from __future__ import annotations

import functools

import gradio as gr

from chexretrieve.ui.render import esc

#: keyword arguments of every event listener: no public API endpoint for it
PRIVATE = {"api_visibility": "private"}


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


def user_errors(fn):
    """Turn ValueError (bad input, unreadable file) into an escaped error toast."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise fail(exc) from None

    return wrapper
