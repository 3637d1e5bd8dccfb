"""The ``users`` table of a store: the accounts that may sign in to `chexretrieve serve`.

Plain rows in and out (:class:`AccountRow`); the password policy, hashing and roles live in the
SQLAlchemy-free :mod:`chexretrieve.accounts`, which is the only caller. Names are compared as
typed after trimming (the login form does the same), and are unique.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from chexretrieve.store.schema import ROLES, UserAccount

_USERS = UserAccount.__table__


@dataclass(frozen=True)
class AccountRow:
    """One user account as stored."""

    name: str
    role: str
    # argon2id PHC string, None for an account that signs in only through a trusted proxy
    password_hash: str | None
    disabled: bool
    created_at: dt.datetime
    updated_at: dt.datetime


def _row(r) -> AccountRow:  # noqa: ANN001
    return AccountRow(
        name=r.name,
        role=r.role,
        password_hash=r.password_hash,
        disabled=bool(r.disabled),
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


class AccountTable:
    """Reads and writes of the ``users`` table of one open :class:`~chexretrieve.store.Store`."""

    def __init__(self, store) -> None:  # noqa: ANN001 - a Store (not imported: no cycle)
        self.store = store

    def get(self, name: str) -> AccountRow | None:
        with self.store._read() as conn:
            found = conn.execute(select(_USERS).where(_USERS.c.name == name)).first()
        return None if found is None else _row(found)

    def all(self) -> list[AccountRow]:
        with self.store._read() as conn:
            rows = conn.execute(select(_USERS).order_by(_USERS.c.name)).all()
        return [_row(r) for r in rows]

    def count(self) -> int:
        return len(self.all())

    def add(self, name: str, role: str, password_hash: str | None) -> AccountRow:
        """Insert a new account; ValueError when the name is taken or the role unknown."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
        now = dt.datetime.now(dt.UTC)
        try:
            with self.store._write() as conn:
                conn.execute(
                    insert(UserAccount).values(
                        name=name,
                        role=role,
                        password_hash=password_hash,
                        disabled=0,
                        created_at=now,
                        updated_at=now,
                    )
                )
        except IntegrityError:
            raise ValueError(
                f"a user named {name!r} exists already; change their password with "
                f"`chexretrieve users passwd {name}`"
            ) from None
        found = self.get(name)
        assert found is not None
        return found

    def change(self, name: str, **values) -> AccountRow:
        """Update ``role``, ``password_hash`` or ``disabled`` of an existing account."""
        allowed = {"role", "password_hash", "disabled"}
        if set(values) - allowed:
            raise ValueError(f"only {', '.join(sorted(allowed))} of an account can be changed")
        if "role" in values and values["role"] not in ROLES:
            raise ValueError(f"unknown role {values['role']!r}; choose one of {', '.join(ROLES)}")
        if "disabled" in values:
            values["disabled"] = int(bool(values["disabled"]))
        with self.store._write() as conn:
            changed = conn.execute(
                update(UserAccount)
                .where(UserAccount.name == name)
                .values(**values, updated_at=dt.datetime.now(dt.UTC))
            ).rowcount
        if not changed:
            raise ValueError(
                f"there is no user named {name!r}; list them with `chexretrieve users list`"
            )
        found = self.get(name)
        assert found is not None
        return found
