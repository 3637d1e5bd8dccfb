"""Who may use the case-lookup server, and what: sign-in, sessions, roles, the routes it answers.

Three sign-in modes (``UIConfig.sign_in``):

- ``"none"``: no sign-in; only on a loopback address (the operator at the machine), who acts as
  :data:`~chexretrieve.accounts.roles.LOCAL_ROLE`.
- ``"accounts"``: the store's ``users`` table (argon2id,
  :class:`~chexretrieve.accounts.book.AccountBook`); signing in and out is answered by
  :class:`~chexretrieve.ui.sign_in.SignInDesk` (never by Gradio's own login route), attempts
  throttled per user name and per client address in the store, sessions kept in the store
  (:class:`~chexretrieve.accounts.sessions.SessionBook`): every server process on it knows them
  and an administrator's ``users passwd|disable|role`` ends them. Each request's session is
  checked in the store and handed to Gradio under a cookie only this guard sets.
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

import hashlib
import logging
import re
from collections import OrderedDict
from urllib.parse import unquote

from starlette.concurrency import run_in_threadpool

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.accounts.roles import LOCAL_ROLE, require
from chexretrieve.accounts.sessions import SessionBook
from chexretrieve.accounts.throttle import LoginThrottle
from chexretrieve.ui.queue_guard import refuse_bad_event
from chexretrieve.ui.sign_in import Answer, SignInDesk, cookie_names

log = logging.getLogger("chexretrieve.ui.access")

SIGN_IN_MODES = ("none", "accounts", "header")
#: the event routes whose bodies are checked before Gradio reads them
_EVENT_ROUTES = ("/gradio_api/queue/join", "/gradio_api/cancel")
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
#: routes of the page's static files: answered without looking up a session
_ASSETS = re.compile(
    r"^/(?:favicon\.ico|theme\.css|manifest\.json|robots\.txt|pwa_icon(?:/\d+)?"
    r"|(?:assets|static|svelte)/.+)$"
)
#: sessions handed to Gradio remembered per process (the oldest handed over go first)
_HANDED_MAX = 10_000
#: largest body of any other request but an upload (an event with its texts: the UI's own caps
#: are far below; beyond this the body is not read at all and the answer is 413)
EVENT_BODY_MAX = 16 * 1024 * 1024


def route_allowed(path: str) -> bool:
    """Whether the page needs ``path`` (after percent-decoding; '..' is never allowed)."""
    path = unquote(path)
    if ".." in path or "//" in path or "\\" in path:
        return False
    return bool(_ALLOWED.match(path))


class AccessControl:
    """The sign-in mode of one server and the role checks of its handlers.

    ``state``: the store's :class:`~chexretrieve.store.access_state.AccessState` (sessions,
    sign-in counts, viewer grants); required to sign in with accounts. ``audit``: the audit trail
    sign-ins and sign-outs are written to."""

    def __init__(
        self, mode: str = "none", book=None, config: AccessConfig | None = None,  # noqa: ANN001
        state=None, audit=None, clock=None,  # noqa: ANN001
    ) -> None:  # fmt: skip
        if mode not in SIGN_IN_MODES:
            raise ValueError(f"unknown sign-in mode {mode!r}; choose one of {SIGN_IN_MODES}")
        if mode != "none" and book is None:
            raise ValueError(f"sign-in mode {mode!r} needs the store's accounts")
        self.mode = mode
        self.book = book
        self.config = config or AccessConfig()
        self.state = state
        self.desk: SignInDesk | None = None
        if mode == "accounts" and state is not None:
            sessions = SessionBook(state, self.config, clock)
            throttle = LoginThrottle(state, self.config, clock)
            self.desk = SignInDesk(book, sessions, throttle, audit)

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
        """``auth`` for ``Blocks.launch`` in accounts mode (else None): it makes Gradio show its
        login form, and refuses everything, because AccessGuard answers every ``/login`` itself
        (the throttle cannot be gone around through Gradio's route)."""
        if self.mode != "accounts":
            return None

        def never(username: str, password: str) -> bool:  # noqa: ARG001
            return False

        return never

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
            scope = await self._accounts(scope, receive, send, path, peer)
            if scope is None:  # answered (sign-in, sign-out)
                return
        if not path.startswith("/gradio_api/upload"):  # uploads: Gradio's own --max-upload-mb
            if _declared_length(scope) > EVENT_BODY_MAX:
                await _answer(send, 413, b"request body too large")
                return
            receive = _capped_receive(receive, EVENT_BODY_MAX)
        if path.rstrip("/") in _EVENT_ROUTES and scope.get("method") == "POST":
            receive = await refuse_bad_event(self.blocks, path.rstrip("/"), receive, send)
            if receive is None:  # answered 4xx: an unknown or malformed event
                return
        await self.app(scope, receive, send)

    async def _accounts(self, scope, receive, send, path: str, peer: str | None):  # noqa: ANN001, ANN202
        """Accounts mode: answer ``/login`` and ``/logout`` (None), else the scope to pass on,
        its session checked in the store and handed to Gradio."""
        desk = self.access.desk
        client = self._client_of(scope, peer)
        secure = self._secure(scope, peer)
        route = path.rstrip("/")
        if route in ("/login", "/logout") and desk is None:
            await _answer(send, 503, b"sign-in is not set up on this server", _TEXT)
            return None
        if route == "/login":
            await _send(send, await desk.sign_in(scope, receive, client, secure))
            return None
        token = _cookies(scope).get(cookie_names(secure)[0])
        if route == "/logout":
            await _send(send, await desk.sign_out(scope, token, client, secure))
            return None
        user = None
        if desk is not None and token and not _ASSETS.match(path):
            user = await run_in_threadpool(desk.user_of_token, token, client)
        return self._hand_to_gradio(scope, token, user)

    def _hand_to_gradio(self, scope, token: str | None, user: str | None) -> dict:  # noqa: ANN001
        """The scope with Gradio's own session cookies removed (whatever the browser sent) and,
        for a live session, one naming ``user`` that Gradio's ``tokens`` map knows."""
        server = self._server()
        kept = [
            part.strip()
            for name, value in scope.get("headers", [])
            if name == b"cookie"
            for part in value.decode("latin-1").split(";")
            if part.strip() and not part.strip().startswith("access-token-")
        ]
        if user and token and server is not None:
            handed = getattr(server, "tokens", None)
            if not isinstance(handed, _HandedSessions):
                handed = server.tokens = _HandedSessions()
            alias = "s-" + hashlib.sha256(token.encode("latin-1")).hexdigest()[:40]
            handed.hand(alias, user)
            kept.append(f"access-token-{server.cookie_id}={alias}")
        headers = [(k, v) for k, v in scope.get("headers", []) if k != b"cookie"]
        if kept:
            headers.append((b"cookie", "; ".join(kept).encode("latin-1")))
        return {**scope, "headers": headers}

    def _secure(self, scope, peer: str | None) -> bool:  # noqa: ANN001
        """Served over TLS: by this server, or by a trusted proxy that says so."""
        if scope.get("scheme") == "https":
            return True
        if self.access.config.is_trusted_proxy(peer):
            for name, value in scope.get("headers", []):
                if name == b"x-forwarded-proto":
                    return value.decode("latin-1").split(",")[-1].strip().lower() == "https"
        return False

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


class _HandedSessions(OrderedDict):
    """Gradio's ``tokens`` map (cookie value -> user) as the guard fills it: each request's
    session, checked in the store, under a cookie the guard sets itself (the browser's own
    ``access-token-*`` cookies are removed first). At most ``_HANDED_MAX`` are remembered."""

    def hand(self, alias: str, user: str) -> None:
        self[alias] = user
        self.move_to_end(alias)
        while len(self) > _HANDED_MAX:
            self.popitem(last=False)


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


async def _send(send, answer: Answer) -> None:  # noqa: ANN001
    await _answer(send, answer.status, answer.body, answer.headers)


async def _answer(send, status: int, body: bytes, headers=()) -> None:  # noqa: ANN001
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
