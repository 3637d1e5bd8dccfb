"""Signed-in sessions of `chexretrieve serve`, kept in the store (issue 33).

A session is a random token (256 bits) in an HttpOnly cookie; the store keeps only its SHA-256
with the user, the address it signed in from and its times
(:class:`chexretrieve.store.access_state.AccessState`), so every server process on the store
knows it, a restart keeps it, and it can be ended from anywhere: ``users passwd``, ``disable``
and ``role`` end every session of that account, "Sign out everywhere" every session of its user.

A session ends ``AccessConfig.session_max_age_s`` after it began, after ``session_idle_s``
without a request (its last request is written at most once a minute), or when its account is
disabled or removed.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from chexretrieve.accounts.state import UsesAccessState

#: sessions started by one process between two purges of ended ones
PURGE_EVERY = 200
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,128}$")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("ascii", "replace")).hexdigest()


def fingerprint(token: str) -> str:
    """A short name of a session for the audit trail and logs (not enough to use it)."""
    return token_hash(token)[:12]


@dataclass(frozen=True)
class SessionCheck:
    """What a request's session token stands for now."""

    # the signed-in user; None when the token names no live session
    user: str | None
    # the role of that user's account now
    role: str | None = None
    # why a session this token named has just ended ("idle", "max age", "account disabled")
    ended: str | None = None
    # whose session ended
    owner: str | None = None


class SessionBook(UsesAccessState):
    """The sessions of one store (``state``: an ``AccessState``), under ``config``."""

    @property
    def touch_every_s(self) -> float:
        """How stale a session's last request may be before it is written again."""
        return min(60.0, self.config.session_idle_s / 4)

    def start(self, user: str, client: str | None) -> str:
        """A new session of ``user``: its token (for the cookie; never stored)."""
        now, purge = self._now_and_due(PURGE_EVERY)
        if purge:
            self.state.purge_sessions(now, self.config.session_idle_s)
        token = secrets.token_urlsafe(32)
        self.state.add_session(token_hash(token), user, client, now, self.config.session_max_age_s)
        return token

    def check(self, token: str | None) -> SessionCheck:
        """The user of a live session (and note this request), or why it just ended."""
        if not token or not _TOKEN.match(token):
            return SessionCheck(None)
        digest = token_hash(token)
        row = self.state.session(digest)
        if row is None:
            return SessionCheck(None)
        now = self.clock()
        ended = None
        if now >= row.expires_at or now - row.created_at > self.config.session_max_age_s:
            ended = "max age"
        elif now - row.last_seen_at > self.config.session_idle_s:
            ended = "idle"
        elif row.account_disabled:
            ended = "account disabled"
        if ended:
            self.state.remove_session(digest)
            return SessionCheck(None, ended=ended, owner=row.user)
        if now - row.last_seen_at > self.touch_every_s:
            self.state.touch_session(digest, now)
        return SessionCheck(row.user, row.account_role)

    def end(self, token: str | None) -> str | None:
        """End one session; its user (None: no such session)."""
        if not token or not _TOKEN.match(token):
            return None
        return self.state.remove_session(token_hash(token))

    def end_all(self, user: str, keep: str | None = None) -> int:
        """End every session of ``user`` (but the one of token ``keep``); how many ended."""
        return self.state.remove_sessions_of(user, token_hash(keep) if keep else None)

    def count(self, user: str | None = None) -> int:
        return self.state.count_sessions(user)
