"""Signing in and out of `chexretrieve serve --accounts`, answered here and never by Gradio.

Every ``/login`` request, whatever its method, route spelling or body type (a urlencoded form, the
multipart form Gradio's page sends, JSON), goes through :meth:`SignInDesk.sign_in`; Gradio's own
login route is never reached (its ``auth`` callable refuses everything). In order:

1. a cross-site sign-in is refused (``Origin`` / ``Sec-Fetch-Site``: login CSRF);
2. the body is read (16 KiB at most) and parsed; other body types are answered 415;
3. a name or address that is waiting gets 429 with Retry-After, nothing checked;
4. a password-check slot is taken (``AccessConfig.max_concurrent_hashes`` per process, at most
   ``max_waiting_sign_ins`` waiting for ``sign_in_wait_s``; beyond, 503), so a flood of
   sign-ins cannot hold more than that many argon2id hashes (64 MiB each) at once;
5. the attempt is reserved in the store (:class:`chexretrieve.accounts.throttle.LoginThrottle`):
   counted under the name and the address before the hash, or refused (429);
6. the password is checked; a success starts a server-side session (a store row, an HttpOnly,
   SameSite=Lax cookie, Secure over TLS), a failure makes the keys past their free attempts wait.

Every checked sign-in, each lockout, sign-out and ended session is written to the audit trail
(``sign_in``, ``lockout``, ``sign_out``, ``session_revoked``: the name as typed, the address, the
outcome). A successful sign-in whose record cannot be written is refused (fail closed).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from chexretrieve.accounts.sessions import SessionBook, fingerprint
from chexretrieve.accounts.throttle import LoginThrottle, client_key, user_key

log = logging.getLogger("chexretrieve.ui.sign_in")

#: the session cookie over plain HTTP (loopback) and over TLS (the __Host- prefix: Secure, Path=/,
#: no Domain, so no other host or plain-HTTP page can set it)
SESSION_COOKIE = "chexretrieve-session"
SECURE_SESSION_COOKIE = "__Host-chexretrieve-session"
#: largest sign-in body read (a name and a password)
LOGIN_BODY_MAX = 16_384
#: longest name kept from what was typed (the audit's and the throttle's)
TYPED_NAME_MAX = 128
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_JSON = (b"content-type", b"application/json")


class SignInRefused(Exception):
    """A sign-in answered before any password check: HTTP ``status`` with ``text``."""

    def __init__(self, status: int, text: str, headers: tuple = ()) -> None:  # noqa: ANN001
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers


@dataclass
class Answer:
    """An HTTP answer of the sign-in routes."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()


class HashSlots:
    """At most ``size`` password checks at once in this process; at most ``max_waiting`` wait
    (each up to ``wait_s``) for one."""

    def __init__(self, size: int, max_waiting: int, wait_s: float) -> None:
        self.size = size
        self.max_waiting = max_waiting
        self.wait_s = wait_s
        self.waiting = 0
        self.running = 0
        self.peak = 0  # most checks seen running at once (tests and the benchmark read it)
        self._semaphore: asyncio.Semaphore | None = None

    async def acquire(self) -> bool:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.size)
        if self._semaphore.locked() and self.waiting >= self.max_waiting:
            return False
        self.waiting += 1
        try:
            await asyncio.wait_for(self._semaphore.acquire(), self.wait_s)
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1
        self.running += 1
        self.peak = max(self.peak, self.running)
        return True

    def release(self) -> None:
        self.running -= 1
        assert self._semaphore is not None
        self._semaphore.release()


class SignInDesk:
    """Sign-in, sign-out and session checks of one server (``AccessControl`` builds it)."""

    def __init__(self, book, sessions: SessionBook, throttle: LoginThrottle, audit=None) -> None:  # noqa: ANN001
        self.book = book
        self.sessions = sessions
        self.throttle = throttle
        self.audit = audit
        self.config = throttle.config
        self.slots = HashSlots(
            self.config.max_concurrent_hashes,
            self.config.max_waiting_sign_ins,
            self.config.sign_in_wait_s,
        )

    # ------------------------------------------------------------------ audit
    def record(self, action: str, user: str | None, **fields) -> None:  # noqa: ANN003
        """Write one audit record (a no-op without an audit trail); ValueError when it cannot
        be written (the caller decides whether that refuses the action)."""
        if self.audit is not None:
            self.audit.record(action, user or "(no name)", **fields)

    def _record_quietly(self, action: str, user: str | None, **fields) -> None:  # noqa: ANN003
        try:
            self.record(action, user, **fields)
        except ValueError as exc:
            log.error("audit record of %s for %r not written: %s", action, user, exc)

    # ------------------------------------------------------------------ sign in
    async def sign_in(self, scope, receive, client: str | None, secure: bool) -> Answer:  # noqa: ANN001
        try:
            if scope.get("method", "").upper() != "POST":
                raise SignInRefused(405, "sign in with POST", ((b"allow", b"POST"),))
            refuse_cross_site(scope, "sign-in")
            name, password = await read_credentials(scope, receive)
            return await self._check(name, password, client, secure)
        except SignInRefused as refused:
            return Answer(refused.status, _detail(refused.text), (_JSON, *refused.headers))

    async def _check(self, name: str, password: str, client: str | None, secure: bool) -> Answer:
        typed = name[:TYPED_NAME_MAX]
        wait = await run_in_threadpool(self.throttle.wait_s, typed, client)
        if wait > 0:
            return _too_many(wait)
        if not await self.slots.acquire():
            log.warning("sign-in of %r from %s: every password check is busy (503)", typed, client)
            raise SignInRefused(
                503, "too many sign-ins at once: try again in a few seconds", _retry(5)
            )
        try:
            attempt = await run_in_threadpool(self.throttle.reserve, typed, client)
            if not attempt.allowed:
                return _too_many(attempt.wait_s)
            row, reason = await run_in_threadpool(self.book.check_sign_in, name, password)
        finally:
            self.slots.release()
        if row is None:
            await run_in_threadpool(self._failed, attempt, typed, client, reason)
            return Answer(400, _detail("Incorrect credentials."), (_JSON,))
        return await run_in_threadpool(self._signed_in, attempt, row.name, typed, client, secure)

    def _failed(self, attempt, typed: str, client: str | None, reason: str) -> None:  # noqa: ANN001
        wait = self.throttle.failed(attempt)
        log.warning("failed sign-in for %r from %s (next wait %.0f s)", typed, client, wait)
        self._record_quietly(
            "sign_in", typed, client=client, outcome="failed", reason=reason, wait_s=wait
        )
        for kind, seconds in attempt.locked.items():
            self._record_quietly(
                "lockout",
                typed,
                client=client,
                outcome="locked",
                key="user name" if kind == "user" else "client address",
                failures=attempt.counted.get(
                    (user_key(typed) if kind == "user" else client_key(client)) or "", (0, 0)
                )[0],
                wait_s=seconds,
            )

    def _signed_in(
        self, attempt, user: str, typed: str, client: str | None, secure: bool
    ) -> Answer:  # noqa: ANN001
        self.throttle.succeeded(attempt)
        token = self.sessions.start(user, client)
        try:
            self.record(
                "sign_in", typed, client=client, outcome="signed_in", session=fingerprint(token)
            )
        except ValueError as exc:  # fail closed: no audit record, no session
            self.sessions.end(token)
            log.error("sign-in of %r refused: %s", user, exc)
            return Answer(
                503, _detail("the audit trail cannot be written: sign-in refused"), (_JSON,)
            )
        cookie = session_cookie(token, secure, self.config.session_max_age_s)
        body = json.dumps({"success": True}).encode()
        return Answer(200, body, (_JSON, (b"set-cookie", cookie)))

    # ------------------------------------------------------------------ sign out
    async def sign_out(self, scope, token: str | None, client: str | None, secure: bool) -> Answer:  # noqa: ANN001
        """``/logout`` ends this session; ``/logout?everywhere=1`` every session of its user."""
        try:
            refuse_cross_site(scope, "sign-out")
        except SignInRefused as refused:
            return Answer(refused.status, _detail(refused.text), (_JSON,))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        everywhere = (query.get("everywhere") or [""])[0].lower() in ("1", "true", "yes")
        await run_in_threadpool(self._end, token, client, everywhere)
        root = (scope.get("root_path") or "").rstrip("/") + "/"
        headers = [(b"location", root.encode("latin-1"))]
        headers += [(b"set-cookie", expired_cookie(name)) for name in cookie_names(secure)]
        return Answer(302, b"", tuple(headers))

    def _end(self, token: str | None, client: str | None, everywhere: bool) -> None:
        user = self.sessions.end(token)
        if user is None:
            return
        others = self.sessions.end_all(user) if everywhere else 0
        scope = "everywhere" if everywhere else "this session"
        self._record_quietly(
            "sign_out", user, client=client, outcome="signed_out", scope=scope,
            session=fingerprint(token or ""),
        )  # fmt: skip
        if others:
            self._record_quietly(
                "session_revoked", user, client=client, outcome="revoked",
                reason="signed out everywhere", sessions=others,
            )  # fmt: skip

    # ------------------------------------------------------------------ each request
    def user_of_token(self, token: str | None, client: str | None) -> str | None:
        """The user of the session ``token`` names, now (None: no live session); a session that
        just ended (idle, too old, account disabled) is written to the audit trail."""
        check = self.sessions.check(token)
        if check.ended:
            self._record_quietly(
                "sign_out", check.owner, client=client, outcome="expired", reason=check.ended,
                session=fingerprint(token or ""),
            )  # fmt: skip
        return check.user


# ---------------------------------------------------------------------------------- helpers
async def read_credentials(scope, receive) -> tuple[str, str]:  # noqa: ANN001
    """(name, password) of a sign-in body: urlencoded, multipart or JSON; SignInRefused for a
    body too large (413), of another type (415), unreadable (400) or without both fields
    (422)."""
    body = b""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            raise SignInRefused(400, "the sign-in request ended early")
        body += message.get("body", b"")
        if len(body) > LOGIN_BODY_MAX:
            raise SignInRefused(413, "sign-in request too large")
        if not message.get("more_body", False):
            break
    kind = _header(scope, b"content-type").split(";", 1)[0].strip().lower()
    if kind == "application/json":
        try:
            fields = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise SignInRefused(400, "the sign-in body is not JSON") from None
        if not isinstance(fields, dict):
            raise SignInRefused(400, "the sign-in body must be a JSON object")
    elif kind in _FORM_TYPES:
        fields = await _form_fields(scope, body)
    else:
        raise SignInRefused(
            415,
            "sign in with a form (application/x-www-form-urlencoded or multipart/form-data) "
            "or JSON",
        )
    name, password = fields.get("username"), fields.get("password")
    if not isinstance(name, str) or not isinstance(password, str) or not name.strip():
        raise SignInRefused(422, "a user name and a password (text) are needed")
    if not password:
        raise SignInRefused(422, "a user name and a password (text) are needed")
    return name.strip(), password


async def _form_fields(scope, body: bytes) -> dict:  # noqa: ANN001
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    request = Request(scope, replay)
    try:
        form = await request.form(max_files=0, max_fields=16, max_part_size=LOGIN_BODY_MAX)
    except Exception:  # noqa: BLE001 - any parse failure of a hostile body is a plain 400
        raise SignInRefused(400, "the sign-in form could not be read") from None
    try:
        return {k: form.get(k) for k in ("username", "password")}
    finally:
        await form.close()


def refuse_cross_site(scope, what: str) -> None:  # noqa: ANN001
    """SignInRefused (403) for a request another site's page made (login/logout CSRF): a
    ``Sec-Fetch-Site`` of another site, or an ``Origin`` that is not this server's host."""
    fetch_site = _header(scope, b"sec-fetch-site").lower()
    if fetch_site in ("cross-site", "same-site"):
        raise SignInRefused(403, f"{what} from another site's page refused")
    origin = _header(scope, b"origin")
    if not origin:
        return
    host = _header(scope, b"host").lower()
    if origin == "null" or urlsplit(origin).netloc.lower() != host:
        raise SignInRefused(403, f"{what} from another site's page refused")


def cookie_names(secure: bool) -> tuple[str, ...]:
    return (SECURE_SESSION_COOKIE,) if secure else (SESSION_COOKIE,)


def session_cookie(token: str, secure: bool, max_age_s: int) -> bytes:
    """The Set-Cookie value of a new session: HttpOnly, SameSite=Lax, Path=/, Secure over TLS."""
    name = cookie_names(secure)[0]
    text = f"{name}={token}; Max-Age={int(max_age_s)}; Path=/; HttpOnly; SameSite=Lax"
    return (text + ("; Secure" if secure else "")).encode("latin-1")


def expired_cookie(name: str) -> bytes:
    secure = "; Secure" if name.startswith("__Host-") else ""
    return f"{name}=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax{secure}".encode("latin-1")


def _header(scope, name: bytes) -> str:  # noqa: ANN001
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1").strip()
    return ""


def _retry(seconds: float) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"retry-after", str(max(1, int(seconds) + 1)).encode()),)


def _too_many(wait: float) -> Answer:
    seconds = max(1, int(wait) + 1)
    return Answer(
        429,
        _detail(f"too many failed sign-ins: try again in {seconds} s"),
        (_JSON, *_retry(wait)),
    )


def _detail(text: str) -> bytes:
    return json.dumps({"detail": text}).encode()
