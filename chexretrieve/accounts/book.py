"""The accounts of a store: add, disable, change passwords and roles, sign in.

``AccountBook(store)`` wraps the store's ``users`` table (:mod:`chexretrieve.store.accounts`) with
the policy: names of letters, digits and ``. _ @ -`` (at most 64), passwords of at least
``AccessConfig.min_password_length`` characters and zxcvbn's ``min_password_score``, hashed with
argon2id, roles from :mod:`chexretrieve.accounts.roles`. Passwords are never logged, printed or
stored in clear. A new password, a new role and disabling end every open session of the account
(issue 33): ``on_sessions_ended(name, reason, count)`` hears of it (the `users` commands write it
to the audit trail).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.accounts.passwords import (
    check_password,
    hash_password,
    needs_rehash,
    verify_password,
)
from chexretrieve.accounts.roles import check_role
from chexretrieve.store.access_state import AccessState
from chexretrieve.store.accounts import AccountRow, AccountTable

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
#: seconds a looked-up role is reused (disabling an account ends its sessions within this)
ROLE_CACHE_S = 2.0


def check_name(name: str) -> str:
    name = (name or "").strip()
    if not _NAME.match(name):
        raise ValueError(
            f"a user name is 1 to 64 letters, digits or . _ @ - (starting with a letter or "
            f"digit), not {name[:80]!r}"
        )
    return name


class AccountBook:
    """The accounts of one store, with the password policy of ``config``."""

    def __init__(
        self,
        store,  # noqa: ANN001
        config: AccessConfig | None = None,
        on_sessions_ended: Callable[[str, str, int], None] | None = None,
    ) -> None:
        self.table = AccountTable(store)
        self.config = config or AccessConfig()
        self.on_sessions_ended = on_sessions_ended
        self._roles: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def _check_password(self, password: str, name: str) -> None:
        check_password(
            password,
            name,
            self.config.min_password_length,
            self.config.min_password_score,
            self.config.site_words,
        )

    def end_sessions(self, name: str, reason: str) -> int:
        """End every open session of ``name`` (in the store: every server process sees it at
        its next request); how many ended."""
        count = AccessState(self.table.store).remove_sessions_of(name)
        self._forget(name)
        if self.on_sessions_ended is not None:
            self.on_sessions_ended(name, reason, count)
        return count

    # ------------------------------------------------------------------ administration
    def add(self, name: str, role: str, password: str | None) -> AccountRow:
        """A new account; ``password`` None = signs in only through the trusted proxy."""
        name = check_name(name)
        check_role(role)
        digest = None
        if password is not None:
            self._check_password(password, name)
            digest = hash_password(password)
        return self.table.add(name, role, digest)

    def set_password(self, name: str, password: str) -> AccountRow:
        """A new password; every open session of the account ends (a stolen one too)."""
        name = check_name(name)
        self._check_password(password, name)
        row = self.table.change(name, password_hash=hash_password(password))
        self.end_sessions(row.name, "password changed")
        return row

    def set_role(self, name: str, role: str) -> AccountRow:
        """A new role; every open session ends (the user signs in again under it)."""
        row = self.table.change(check_name(name), role=check_role(role))
        self.end_sessions(row.name, "role changed")
        return row

    def disable(self, name: str) -> AccountRow:
        """The account may no longer sign in; every open session ends."""
        row = self.table.change(check_name(name), disabled=True)
        self.end_sessions(row.name, "account disabled")
        return row

    def enable(self, name: str) -> AccountRow:
        row = self.table.change(check_name(name), disabled=False)
        self._forget(name)
        return row

    def list(self) -> list[AccountRow]:
        return self.table.all()

    def count(self) -> int:
        return self.table.count()

    # ------------------------------------------------------------------ signing in
    def authenticate(self, name: str, password: str) -> AccountRow | None:
        """The account when ``name`` and ``password`` match an enabled account, else None (the
        same work is done for an unknown name, so timing does not tell names apart)."""
        return self.check_sign_in(name, password)[0]

    def check_sign_in(self, name: str, password: str) -> tuple[AccountRow | None, str]:
        """(the account or None, why) for a sign-in: "signed in", "unknown user", "wrong
        password", "account disabled", "no password (SSO only)" or "not a user name". The
        reason is for the audit trail only; the person signing in is told none of it."""
        try:
            name = check_name(name)
        except ValueError:
            verify_password(None, password or "")
            return None, "not a user name"
        row = self.table.get(name)
        ok = verify_password(row.password_hash if row else None, password or "")
        if row is None:
            return None, "unknown user"
        if row.password_hash is None:
            return None, "no password (SSO only)"
        if not ok:
            return None, "wrong password"
        if row.disabled:
            return None, "account disabled"
        read_only = getattr(self.table.store, "read_only", False)  # serve never writes the store
        if needs_rehash(row.password_hash or "") and not read_only:
            self.table.change(name, password_hash=hash_password(password))
        return row, "signed in"

    def active_role(self, name: str | None) -> str | None:
        """The role of an enabled account named ``name``; None for no such enabled account."""
        if not name:
            return None
        now = time.monotonic()
        with self._lock:
            cached = self._roles.get(name)
        if cached is not None and now - cached[0] < ROLE_CACHE_S:
            return cached[1]
        try:
            row = self.table.get(check_name(name))
        except ValueError:
            row = None
        role = None if row is None or row.disabled else row.role
        with self._lock:
            if len(self._roles) > 10_000:
                self._roles.clear()
            self._roles[name] = (now, role)
        return role

    def _forget(self, name: str) -> None:
        with self._lock:
            self._roles.pop(name.strip(), None)
