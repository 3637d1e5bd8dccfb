"""The accounts of a store: add, disable, change passwords and roles, sign in.

``AccountBook(store)`` wraps the store's ``users`` table (:mod:`chexretrieve.store.accounts`) with
the policy: names of letters, digits and ``. _ @ -`` (at most 64), passwords of at least
``AccessConfig.min_password_length`` characters hashed with argon2id, roles from
:mod:`chexretrieve.accounts.roles`. Passwords are never logged, printed or stored in clear.
"""

from __future__ import annotations

import re
import threading
import time

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.accounts.passwords import (
    check_password,
    hash_password,
    needs_rehash,
    verify_password,
)
from chexretrieve.accounts.roles import check_role
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

    def __init__(self, store, config: AccessConfig | None = None) -> None:  # noqa: ANN001
        self.table = AccountTable(store)
        self.config = config or AccessConfig()
        self._roles: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ administration
    def add(self, name: str, role: str, password: str | None) -> AccountRow:
        """A new account; ``password`` None = signs in only through the trusted proxy."""
        name = check_name(name)
        check_role(role)
        digest = None
        if password is not None:
            check_password(password, name, self.config.min_password_length)
            digest = hash_password(password)
        return self.table.add(name, role, digest)

    def set_password(self, name: str, password: str) -> AccountRow:
        name = check_name(name)
        check_password(password, name, self.config.min_password_length)
        return self.table.change(name, password_hash=hash_password(password))

    def set_role(self, name: str, role: str) -> AccountRow:
        row = self.table.change(check_name(name), role=check_role(role))
        self._forget(name)
        return row

    def disable(self, name: str) -> AccountRow:
        row = self.table.change(check_name(name), disabled=True)
        self._forget(name)
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
        try:
            name = check_name(name)
        except ValueError:
            verify_password(None, password or "")
            return None
        row = self.table.get(name)
        ok = verify_password(row.password_hash if row else None, password or "")
        if not ok or row is None or row.disabled:
            return None
        read_only = getattr(self.table.store, "read_only", False)  # serve never writes the store
        if needs_rehash(row.password_hash or "") and not read_only:
            self.table.change(name, password_hash=hash_password(password))
        return row

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
