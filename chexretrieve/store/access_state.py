"""What every server process on one store must agree on about who is signed in (issue 33).

Three tables, read and written here only (plain values in and out; the policy lives in the
SQLAlchemy-free :mod:`chexretrieve.accounts` and :mod:`chexretrieve.viewer_web.access`):

- ``web_sessions``: signed-in sessions by the SHA-256 of their token (the token itself is only in
  the browser's cookie), with the user, the times and the address;
- ``sign_in_counts``: attempts per user name and per client address, counted *before* the
  password is checked, in one write transaction per attempt (``BEGIN IMMEDIATE`` on SQLite, a
  row lock on PostgreSQL), so parallel attempts from any number of processes are each counted;
- ``viewer_grants``: the viewer links a search handed out and the viewer sessions opened from
  them.

``open_access_state(url)`` opens its own writable engine: ``serve`` reads the archive through a
read-only store and writes these three tables only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select, update

from chexretrieve.store.schema import SignInCount, UserAccount, ViewerGrant, WebSession

_SESSIONS = WebSession.__table__
_COUNTS = SignInCount.__table__
_GRANTS = ViewerGrant.__table__
_USERS = UserAccount.__table__


@dataclass(frozen=True)
class SessionRow:
    """A stored session, with its account as it is now (None: the account was removed)."""

    token_hash: str
    user: str
    client: str | None
    created_at: float
    last_seen_at: float
    expires_at: float
    account_role: str | None
    account_disabled: bool


@dataclass(frozen=True)
class Reservation:
    """The outcome of reserving one sign-in attempt (:meth:`AccessState.reserve_attempt`)."""

    allowed: bool
    # seconds until an attempt may be checked (refused) or 0
    wait_s: float
    # key -> (failures counted now, locked_until before this attempt), for each key counted
    counted: dict[str, tuple[int, float]]
    # keys this attempt locked (its count reached the free attempts): key -> seconds locked
    locked: dict[str, float]


class AccessState:
    """Sessions, sign-in counts and viewer grants of one (writable) store."""

    def __init__(self, store) -> None:  # noqa: ANN001 - a Store (not imported: no cycle)
        self.store = store

    @property
    def label(self) -> str:
        return self.store.label

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------------ sessions
    def add_session(
        self, token_hash: str, user: str, client: str | None, now: float, max_age_s: float
    ) -> None:
        with self.store._write() as conn:
            conn.execute(
                insert(WebSession).values(
                    token_hash=token_hash,
                    user_name=user,
                    client=(client or None) and client[:64],
                    created_at=now,
                    last_seen_at=now,
                    expires_at=now + max_age_s,
                )
            )

    def session(self, token_hash: str) -> SessionRow | None:
        query = (
            select(_SESSIONS, _USERS.c.role, _USERS.c.disabled)
            .select_from(_SESSIONS.outerjoin(_USERS, _USERS.c.name == _SESSIONS.c.user_name))
            .where(_SESSIONS.c.token_hash == token_hash)
        )
        with self.store._read() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        return SessionRow(
            token_hash=row.token_hash,
            user=row.user_name,
            client=row.client,
            created_at=float(row.created_at),
            last_seen_at=float(row.last_seen_at),
            expires_at=float(row.expires_at),
            account_role=row.role,
            account_disabled=bool(row.disabled) if row.role is not None else True,
        )

    def touch_session(self, token_hash: str, now: float) -> None:
        with self.store._write() as conn:
            conn.execute(
                update(WebSession)
                .where(WebSession.token_hash == token_hash)
                .values(last_seen_at=now)
            )

    def remove_session(self, token_hash: str) -> str | None:
        """Delete one session; its user (None: there was no such session)."""
        with self.store._write() as conn:
            user = conn.execute(
                select(_SESSIONS.c.user_name).where(_SESSIONS.c.token_hash == token_hash)
            ).scalar()
            if user is not None:
                conn.execute(delete(WebSession).where(WebSession.token_hash == token_hash))
        return user

    def remove_sessions_of(self, user: str, keep: str | None = None) -> int:
        """Delete every session of ``user`` (but the one of token hash ``keep``); how many."""
        condition = _SESSIONS.c.user_name == user
        if keep is not None:
            condition = condition & (_SESSIONS.c.token_hash != keep)
        with self.store._write() as conn:
            return int(conn.execute(delete(WebSession).where(condition)).rowcount or 0)

    def count_sessions(self, user: str | None = None) -> int:
        query = select(func.count()).select_from(_SESSIONS)
        if user is not None:
            query = query.where(_SESSIONS.c.user_name == user)
        with self.store._read() as conn:
            return int(conn.execute(query).scalar_one())

    def purge_sessions(self, now: float, idle_s: float) -> int:
        """Delete sessions past their longest age or idle longer than ``idle_s``."""
        stale = (_SESSIONS.c.expires_at <= now) | (_SESSIONS.c.last_seen_at <= now - idle_s)
        with self.store._write() as conn:
            return int(conn.execute(delete(WebSession).where(stale)).rowcount or 0)

    # ------------------------------------------------------------------ sign-in counts
    def wait_s(self, keys: Iterable[str], now: float) -> float:
        """Seconds before an attempt under ``keys`` may be checked (0: now); a read only."""
        keys = list(keys)
        if not keys:
            return 0.0
        with self.store._read() as conn:
            until = conn.execute(
                select(func.max(_COUNTS.c.locked_until)).where(_COUNTS.c.key.in_(keys))
            ).scalar()
        return max(0.0, float(until or 0.0) - now)

    def reserve_attempt(
        self,
        keys: Sequence[tuple[str, int]],
        now: float,
        delay_after: Callable[[int, int], float],
        forget_after_s: float,
    ) -> Reservation:
        """Count one attempt under every ``(key, free attempts)`` in one write transaction, unless
        one key is locked (then nothing is counted). A key quiet for ``forget_after_s`` starts
        again from 0. A count reaching ``free`` locks its key for ``delay_after(count, free)``
        seconds from ``now`` (the attempt counted is still checked: the lock stops the next)."""
        names = [k for k, _ in keys]
        with self.store._write() as conn:
            self._ensure_rows(conn, names, now)
            rows = {
                r.key: r
                for r in conn.execute(
                    select(_COUNTS)
                    .where(_COUNTS.c.key.in_(names))
                    .order_by(_COUNTS.c.key)
                    .with_for_update()
                ).all()
            }
            wait = max([0.0, *(float(r.locked_until) - now for r in rows.values())])
            if wait > 0:
                return Reservation(False, wait, {}, {})
            counted: dict[str, tuple[int, float]] = {}
            locked: dict[str, float] = {}
            for key, free in keys:
                row = rows[key]
                fresh = now - float(row.updated_at) > forget_after_s
                failures = (0 if fresh else int(row.failures)) + 1
                until = float(row.locked_until)
                if failures >= free:
                    locked[key] = delay_after(failures, free)
                    until = now + locked[key]
                counted[key] = (failures, float(row.locked_until))
                conn.execute(
                    update(SignInCount)
                    .where(SignInCount.key == key)
                    .values(failures=failures, locked_until=until, updated_at=now)
                )
        return Reservation(True, 0.0, counted, locked)

    def lock_keys(self, locks: dict[str, float]) -> None:
        """Make each key wait at least until ``locks[key]`` (UTC seconds)."""
        with self.store._write() as conn:
            for key, until in locks.items():
                conn.execute(
                    update(SignInCount)
                    .where(SignInCount.key == key, SignInCount.locked_until < until)
                    .values(locked_until=until)
                )

    def clear_keys(self, keys: Iterable[str]) -> None:
        """Forget the counts of ``keys`` (a success of that user name)."""
        keys = list(keys)
        if keys:
            with self.store._write() as conn:
                conn.execute(delete(SignInCount).where(SignInCount.key.in_(keys)))

    def give_back(self, counted: dict[str, tuple[int, float]], now: float) -> None:
        """Take back one counted attempt of each key (a success from that address): its count
        goes down by one and a lock this attempt set is lifted."""
        with self.store._write() as conn:
            for key, (_, locked_before) in counted.items():
                conn.execute(
                    update(SignInCount)
                    .where(SignInCount.key == key, SignInCount.failures > 0)
                    .values(
                        failures=SignInCount.failures - 1,
                        locked_until=func.min(SignInCount.locked_until, locked_before)
                        if self.store.dialect == "sqlite"
                        else func.least(SignInCount.locked_until, locked_before),
                        updated_at=now,
                    )
                )

    def failures(self, key: str) -> int:
        with self.store._read() as conn:
            found = conn.execute(select(_COUNTS.c.failures).where(_COUNTS.c.key == key)).scalar()
        return int(found or 0)

    def purge_counts(self, now: float, forget_after_s: float) -> int:
        """Delete the counts of keys quiet for ``forget_after_s`` and not locked."""
        stale = (_COUNTS.c.updated_at <= now - forget_after_s) & (_COUNTS.c.locked_until <= now)
        with self.store._write() as conn:
            return int(conn.execute(delete(SignInCount).where(stale)).rowcount or 0)

    def _ensure_rows(self, conn, keys: list[str], now: float) -> None:  # noqa: ANN001
        """A row for each key (another process may insert the same one at the same time)."""
        if self.store.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as upsert
        else:
            from sqlalchemy.dialects.sqlite import insert as upsert
        for key in sorted(keys):  # one order everywhere: no two writers wait on each other
            conn.execute(
                upsert(SignInCount)
                .values(key=key, failures=0, locked_until=0.0, updated_at=now)
                .on_conflict_do_nothing(index_elements=["key"])
            )

    # ------------------------------------------------------------------ viewer grants
    def add_grant(
        self, kind: str, token_hash: str, user: str, studies: Iterable[str], now: float
    ) -> None:
        with self.store._write() as conn:
            conn.execute(
                insert(ViewerGrant).values(
                    token_hash=token_hash,
                    kind=kind,
                    user_name=user,
                    studies=json.dumps(sorted(set(studies))),
                    created_at=now,
                )
            )

    def grant(self, kind: str, token_hash: str) -> tuple[str, set[str], float] | None:
        """(user, studies, created) of a grant or viewer session; None when unknown."""
        with self.store._read() as conn:
            row = conn.execute(
                select(_GRANTS).where(_GRANTS.c.token_hash == token_hash, _GRANTS.c.kind == kind)
            ).first()
        if row is None:
            return None
        return row.user_name, set(json.loads(row.studies)), float(row.created_at)

    def extend_grant(self, token_hash: str, studies: Iterable[str]) -> None:
        """Add ``studies`` to a viewer session's allow-list (one transaction)."""
        with self.store._write() as conn:
            row = conn.execute(
                select(_GRANTS.c.studies).where(_GRANTS.c.token_hash == token_hash)
            ).first()
            if row is not None:
                merged = set(json.loads(row.studies)) | set(studies)
                conn.execute(
                    update(ViewerGrant)
                    .where(ViewerGrant.token_hash == token_hash)
                    .values(studies=json.dumps(sorted(merged)))
                )

    def purge_grants(self, older_than: float, keep_at_most: int) -> int:
        """Delete grants created before ``older_than`` and, beyond ``keep_at_most`` of a kind,
        the oldest."""
        removed = 0
        with self.store._write() as conn:
            removed += int(
                conn.execute(delete(ViewerGrant).where(ViewerGrant.created_at < older_than))
                .rowcount or 0
            )  # fmt: skip
            for kind in ("grant", "session"):
                cutoff = conn.execute(
                    select(_GRANTS.c.created_at)
                    .where(_GRANTS.c.kind == kind)
                    .order_by(_GRANTS.c.created_at.desc())
                    .offset(keep_at_most)
                    .limit(1)
                ).scalar()
                if cutoff is not None:
                    removed += int(
                        conn.execute(
                            delete(ViewerGrant).where(
                                ViewerGrant.kind == kind, ViewerGrant.created_at <= cutoff
                            )
                        ).rowcount
                        or 0
                    )
        return removed


def open_access_state(url: str) -> AccessState:
    """The access state of the store at ``url``, on an engine of its own that may write (serve's
    archive store is read-only). StoreError when the store cannot be written (a read-only file or
    mount) or is not at this chexretrieve's schema (nothing is migrated here)."""
    from chexretrieve.store.config import StoreConfig
    from chexretrieve.store.engine import StoreError
    from chexretrieve.store.schema_version import check_schema
    from chexretrieve.store.store import Store

    config = StoreConfig(url=url, create_if_missing=False, migrate_on_open=False)
    try:
        store = Store(config)
    except StoreError as exc:
        raise StoreError(
            f"sign-in needs a store it can write its sessions and sign-in counts to: {exc}"
        ) from None
    try:
        check_schema(store.engine, config)
    except StoreError:
        store.close()
        raise
    return AccessState(store)
