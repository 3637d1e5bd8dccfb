"""Who may use the case-lookup server, and what: sign-in, sessions, roles, the routes it answers.

Three sign-in modes (``UIConfig.sign_in``):

- ``"none"``: no sign-in; only on a loopback address (the operator at the machine), who acts as
  :data:`~chexretrieve.accounts.roles.LOCAL_ROLE`.
- ``"accounts"``: Gradio's login form checked against the store's ``users`` table (argon2id,
  :class:`~chexretrieve.accounts.book.AccountBook`); failed attempts throttled per user name and
  per client address (:class:`~chexretrieve.accounts.throttle.LoginThrottle`); a session ends
  after ``AccessConfig.session_max_age_s``, after ``session_idle_s`` without a request, or within
  seconds of its account being disabled.
- ``"header"``: a hospital's SSO reverse proxy signs users in and names them in
  ``AccessConfig.trusted_header``; only requests from ``AccessConfig.trusted_proxies`` are
  answered, and the named user must have an enabled account (for the role).

Handlers check the role on the server, from the request's user, never from the page:
``access.require(request, "edit_anchor_sets")`` returns the user name or raises
:class:`~chexretrieve.accounts.roles.AccessRefused` (a ValueError: ``events.attempt`` shows its
text). :class:`AccessGuard` (ASGI) answers only the routes the page itself uses (a 404 for every
other one: no REST endpoint per handler, no API description, no file route, no monitoring).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.accounts.roles import LOCAL_ROLE, require
from chexretrieve.accounts.throttle import LoginThrottle

log = logging.getLogger("chexretrieve.ui.access")

SIGN_IN_MODES = ("none", "accounts", "header")
#: the only routes answered: the page, its assets, the login, the event queue, uploads
_ALLOWED = re.compile(
    r"^/(?:"
    r"|config/?|login/?|logout/?|favicon\.ico|theme\.css|manifest\.json|robots\.txt"
    r"|pwa_icon(?:/\d+)?|(?:assets|static|svelte)/.+"
    r"|gradio_api/(?:queue/(?:join|data)|heartbeat/[^/]+|upload|upload_progress|cancel"
    r"|reset/?|startup-events|app_id/?|user/?|token/?|login_check/?|theme\.css)"
    # the OHIF viewer and the app's DICOMweb endpoint (chexretrieve.ui.viewer_links): answered
    # by the viewer gate, which checks the user's grants; a 404 when no viewer is installed
    r"|viewer(?:/.*)?|dicomweb/.+"
    r")$"
)
#: largest login form read (a name and a password)
_LOGIN_BODY_MAX = 16_384
#: largest body of any other request but an upload (an event with its texts: the UI's own caps
#: are far below; beyond this the body is not read at all and the answer is 413)
EVENT_BODY_MAX = 16 * 1024 * 1024


def route_allowed(path: str) -> bool:
    """Whether the page needs ``path`` (after percent-decoding; '..' is never allowed)."""
    path = unquote(path)
    if ".." in path or "//" in path or "\\" in path:
        return False
    return bool(_ALLOWED.match(path))


@dataclass
class _Session:
    user: str
    started: float
    last: float


class AccessControl:
    """The sign-in mode of one server and the role checks of its handlers."""

    def __init__(
        self, mode: str = "none", book=None, config: AccessConfig | None = None,  # noqa: ANN001
        clock=time.monotonic,  # noqa: ANN001
    ) -> None:  # fmt: skip
        if mode not in SIGN_IN_MODES:
            raise ValueError(f"unknown sign-in mode {mode!r}; choose one of {SIGN_IN_MODES}")
        if mode != "none" and book is None:
            raise ValueError(f"sign-in mode {mode!r} needs the store's accounts")
        self.mode = mode
        self.book = book
        self.config = config or AccessConfig()
        self.throttle = LoginThrottle(self.config, clock)
        self.clock = clock
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ roles
    def user_of(self, request) -> str | None:  # noqa: ANN001 - a gr.Request
        name = getattr(request, "username", None) if request is not None else None
        return str(name) if name else None

    def role_of(self, request) -> str | None:  # noqa: ANN001
        """The role of the request's user now (None: no enabled account)."""
        if self.mode == "none":
            return LOCAL_ROLE
        return self.book.active_role(self.user_of(request))

    def require(self, request, action: str) -> str | None:  # noqa: ANN001
        """The user name when the request's user may do ``action``; AccessRefused otherwise."""
        user = self.user_of(request)
        require(self.role_of(request), action, user)
        return user

    # ------------------------------------------------------------------ Gradio hooks
    def gradio_auth(self):  # noqa: ANN201
        """``auth`` for ``Blocks.launch`` (accounts mode), else None."""
        if self.mode != "accounts":
            return None

        def check(username: str, password: str) -> bool:
            return self.book.authenticate(username, password) is not None

        return check

    def auth_dependency(self):  # noqa: ANN201
        """``auth_dependency`` for ``Blocks.launch`` (header mode), else None."""
        if self.mode != "header":
            return None
        header = self.config.trusted_header.lower()

        def user_of_request(request) -> str | None:  # noqa: ANN001 - fastapi.Request
            peer = request.client.host if request.client else None
            if not self.config.is_trusted_proxy(peer):
                return None
            name = (request.headers.get(header) or "").strip()
            if not name or self.book.active_role(name) is None:
                return None
            return name

        return user_of_request

    # ------------------------------------------------------------------ sessions
    def session_alive(self, token: str, user: str) -> bool:
        """Whether the session of ``token`` may go on (and note this request)."""
        now = self.clock()
        with self._lock:
            session = self._sessions.get(token)
            if session is None or session.user != user:
                session = self._sessions[token] = _Session(user, now, now)
            expired = (
                now - session.started > self.config.session_max_age_s
                or now - session.last > self.config.session_idle_s
            )
            if expired:
                del self._sessions[token]
                return False
            session.last = now
        return self.book.active_role(user) is not None

    def session_started(self, token: str, user: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._sessions) > 100_000:
                self._sessions.clear()
            self._sessions[token] = _Session(user, now, now)


class AccessGuard:
    """ASGI middleware: only the page's routes; login throttling; session expiry; proxy check."""

    def __init__(self, app, blocks, access: AccessControl) -> None:  # noqa: ANN001
        self.app = app
        self.blocks = blocks
        self.access = access

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        access = self.access
        peer = (scope.get("client") or (None,))[0]
        if scope["type"] == "websocket":  # the page uses none
            await send({"type": "websocket.close", "code": 1008})
            return
        if not route_allowed(path):
            await _answer(send, 404, b"")
            return
        startup = path == "/gradio_api/startup-events"  # Gradio's own launch check (no data)
        if access.mode == "header" and not startup and not access.config.is_trusted_proxy(peer):
            # 401 (not 403): no sign-in came through the proxy (Gradio's launch probe accepts it)
            await _answer(send, 401, b"this server answers only its sign-in proxy", _TEXT)
            return
        if access.mode == "header" and not startup:
            refusal = self._header_refusal(scope)
            if refusal:  # 401: Gradio's own launch probe (no header) accepts that answer
                await _answer(send, 401, refusal.encode("utf-8"), _TEXT)
                return
        if access.mode == "accounts":
            self._end_expired_session(scope)
            if path.rstrip("/") == "/login" and scope.get("method") == "POST":
                await self._login(scope, receive, send, self._client_of(scope, peer))
                return
        if not path.startswith("/gradio_api/upload"):  # uploads: Gradio's own --max-upload-mb
            if _declared_length(scope) > EVENT_BODY_MAX:
                await _answer(send, 413, b"request body too large")
                return
            receive = _capped_receive(receive, EVENT_BODY_MAX)
        await self.app(scope, receive, send)

    def _header_refusal(self, scope) -> str | None:  # noqa: ANN001
        """Why a request through the proxy names no user who may enter (None: it does)."""
        wanted = self.access.config.trusted_header.lower().encode("latin-1")
        names = [v for k, v in scope.get("headers", []) if k == wanted]
        name = names[0].decode("utf-8", "replace").strip() if len(names) == 1 else ""
        if len(names) > 1:
            return f"the sign-in proxy sent {self.access.config.trusted_header} more than once"
        if not name:
            return f"the sign-in proxy named no user ({self.access.config.trusted_header})"
        if self.access.book.active_role(name) is None:
            return (
                f"{name[:64]} has no enabled chexretrieve account: ask an administrator to add "
                "it (chexretrieve users add NAME --role radiologist --sso-only)"
            )
        return None

    def _client_of(self, scope, peer: str | None) -> str | None:  # noqa: ANN001
        """The address sign-ins are counted under: the peer, or behind a trusted proxy
        (``AccessConfig.trusted_proxies``) the last address its X-Forwarded-For names."""
        if not self.access.config.is_trusted_proxy(peer):
            return peer
        for name, value in scope.get("headers", []):
            if name == b"x-forwarded-for":
                last = value.decode("latin-1").split(",")[-1].strip()
                return last[:64] or peer
        return peer

    def _server(self):  # noqa: ANN202
        return getattr(self.blocks, "server_app", None)

    def _token(self, scope) -> str | None:  # noqa: ANN001
        server = self._server()
        if server is None:
            return None
        cookies = _cookies(scope)
        return cookies.get(f"access-token-{server.cookie_id}") or cookies.get(
            f"access-token-unsecure-{server.cookie_id}"
        )

    def _end_expired_session(self, scope) -> None:  # noqa: ANN001
        server, token = self._server(), self._token(scope)
        if server is None or not token or token not in server.tokens:
            return
        if not self.access.session_alive(token, server.tokens[token]):
            server.tokens.pop(token, None)  # Gradio now sees no sign-in: the login page

    async def _login(self, scope, receive, send, peer: str | None) -> None:  # noqa: ANN001
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > _LOGIN_BODY_MAX:
                await _answer(send, 413, b"")
                return
        form = parse_qs(body.decode("utf-8", "replace"))
        user = (form.get("username") or [""])[0].strip()[:128] or None
        throttle = self.access.throttle
        wait = throttle.wait_s(user, peer)
        if wait > 0:
            detail = json.dumps(
                {"detail": f"too many failed sign-ins: try again in {int(wait) + 1} s"}
            ).encode()
            await _answer(send, 429, detail, [(b"retry-after", str(int(wait) + 1).encode())])
            return
        sent = False

        async def replay():  # noqa: ANN202
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        status = {}

        async def watch(message) -> None:  # noqa: ANN001
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == b"set-cookie" and value.startswith(b"access-token-"):
                        status["token"] = value.split(b"=", 1)[1].split(b";", 1)[0].decode()
            await send(message)

        await self.app(scope, replay, watch)
        if status.get("code") == 200 and user:
            throttle.succeeded(user, peer)
            if status.get("token"):
                self.access.session_started(status["token"], user)
        elif status.get("code") == 400:
            waits = throttle.failed(user, peer)
            log.warning("failed sign-in for %r from %s (next wait %.0f s)", user, peer, waits)


def _declared_length(scope) -> int:  # noqa: ANN001
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return EVENT_BODY_MAX + 1
    return 0


def _capped_receive(receive, limit: int):  # noqa: ANN001, ANN202
    """``receive`` that ends the request (a disconnect) once its body passes ``limit`` bytes (a
    chunked body declares no length)."""
    seen = 0

    async def capped():  # noqa: ANN202
        nonlocal seen
        message = await receive()
        if message.get("type") == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                return {"type": "http.disconnect"}
        return message

    return capped


def _cookies(scope) -> dict[str, str]:  # noqa: ANN001
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                found.setdefault(key, val)
    return found


#: headers of a plain-text refusal (never rendered as HTML: it may quote a header's value)
_TEXT = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff")]


async def _answer(send, status: int, body: bytes, headers=()) -> None:  # noqa: ANN001
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
