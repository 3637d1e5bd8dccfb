"""The bodies of the page's event routes checked before Gradio reads them (issue 33, finding 6).

Gradio looks an event up by ``fn_index`` without checking it (an unknown one raised KeyError
inside the request: a 500, or a connection reset with a traceback in the server log) and trusts
the types of the other fields. :func:`refuse_bad_event` reads the body of ``POST
/gradio_api/queue/join`` and ``/gradio_api/cancel`` and answers 4xx with a one-line JSON
``detail`` for anything the page itself never sends: not JSON, not an object, an ``fn_index``
that names no event of this page, fields of the wrong type, a ``session_hash`` that is not the
page's kind of random id. Everything else goes on to Gradio with the same bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

_SESSION_HASH = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_EVENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class BadEvent(ValueError):
    """An event body the page never sends (its text says what is wrong)."""


def check_join(body: object, fns: dict) -> None:
    """BadEvent unless ``body`` is a queue join the page could send for one of ``fns``."""
    if not isinstance(body, dict):
        raise BadEvent("the event must be a JSON object")
    index = body.get("fn_index")
    if not _is_int(index):
        raise BadEvent("fn_index must be a whole number")
    if index not in fns:
        raise BadEvent(f"fn_index {index} names no event of this page")
    if not isinstance(body.get("data"), list):
        raise BadEvent("data must be a list")
    _check_session_hash(body.get("session_hash"))
    trigger = body.get("trigger_id")
    if trigger is not None and not _is_int(trigger):
        raise BadEvent("trigger_id must be a whole number or null")
    event_id = body.get("event_id")
    if event_id is not None and not (isinstance(event_id, str) and _EVENT_ID.match(event_id)):
        raise BadEvent("event_id must be an event id or null")
    for flag in ("simple_format", "batched"):
        if body.get(flag) is not None and not isinstance(body.get(flag), bool):
            raise BadEvent(f"{flag} must be true or false")
    if body.get("oauth_token") is not None and not isinstance(body.get("oauth_token"), str):
        raise BadEvent("oauth_token must be text or null")


def check_cancel(body: object, fns: dict) -> None:
    """BadEvent unless ``body`` is a cancel the page could send."""
    if not isinstance(body, dict):
        raise BadEvent("the cancel must be a JSON object")
    index = body.get("fn_index")
    if not _is_int(index) or index not in fns:
        raise BadEvent("fn_index names no event of this page")
    _check_session_hash(body.get("session_hash"))
    event_id = body.get("event_id")
    if not (isinstance(event_id, str) and _EVENT_ID.match(event_id)):
        raise BadEvent("event_id must be an event id")


def _check_session_hash(value: object) -> None:
    if not (isinstance(value, str) and _SESSION_HASH.match(value)):
        raise BadEvent("session_hash must be the page's session id (1-128 letters or digits)")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_CHECKS = {"/gradio_api/queue/join": check_join, "/gradio_api/cancel": check_cancel}


async def refuse_bad_event(
    blocks, route: str, receive, send
) -> Callable[[], Awaitable[dict]] | None:  # noqa: ANN001
    """Read the body of an event ``route``; answer 4xx and return None when it is not one the
    page sends, else a ``receive`` that replays the same bytes to Gradio."""
    chunks = []
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    raw = b"".join(chunks)
    # the page's events are only this page's functions (no gr.render: the session's are the same)
    fns = getattr(blocks, "fns", {}) or {}
    status = 422
    try:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            status = 400
            raise BadEvent("the body is not JSON") from None
        _CHECKS[route](body, fns)
    except BadEvent as bad:
        answer = json.dumps({"detail": str(bad)}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(answer)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})
        return None
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if sent:
            return await receive()  # the client's disconnect, when it comes
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return replay
