"""The ``audit_anchors`` table: what a store saw of the audit trails written beside it (issue 36).

:class:`AuditAnchorTable` opens its own connection to the store's URL, so the read-only commands
(``search``, ``serve``: their store is opened read-only and never written) can still record the
audit trail's high-water mark; it writes this one table only, never migrates and never creates a
store. A row only ever moves forward: a write whose ``seq`` is not above the stored one changes
nothing (several processes append to one trail and report in any order). Rows are plain dicts;
their meaning and signature belong to :mod:`chexretrieve.audit.anchor`.
"""

from __future__ import annotations

import datetime as dt
import os
import threading

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from chexretrieve.store.config import StoreConfig
from chexretrieve.store.engine import WRITER_OPTION, StoreError, create_store_engine, database_label
from chexretrieve.store.schema import AuditAnchor

_TABLE = AuditAnchor.__table__
#: the columns a caller writes (the times are the store's own; a write also clears ``retired``)
FIELDS = ("trail", "path", "seq", "lines", "size", "last", "mac")


class AuditAnchorTable:
    """Reads and monotonic writes of ``audit_anchors`` in the store at ``url``; thread-safe."""

    def __init__(self, url: str, busy_timeout_s: float = 60.0) -> None:
        self.url = url
        self.label = database_label(url)
        self.busy_timeout_s = busy_timeout_s
        self._engine: Engine | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _connect(self) -> Engine:
        with self._lock:
            if self._engine is not None and self._pid != os.getpid():  # a forked worker
                self._engine.dispose(close=False)  # the parent's connections stay the parent's
                self._engine = None
            self._pid = os.getpid()
            if self._engine is None:
                config = StoreConfig(
                    url=self.url, create_if_missing=False, busy_timeout_s=self.busy_timeout_s
                )
                self._engine = create_store_engine(config)
            return self._engine

    def write(self, row: dict) -> bool:
        """Record ``row`` (FIELDS) unless the store already holds this trail at a seq at least as
        high; True when it changed the table. StoreError when the store cannot be written."""
        values = {name: row[name] for name in FIELDS}
        now = dt.datetime.now(dt.UTC)
        engine = self._connect()  # the dialect of the store's URL
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        statement = dialect.insert(_TABLE).values(**values, first_seen=now, updated_at=now)
        statement = statement.on_conflict_do_update(
            index_elements=[_TABLE.c.trail],
            set_={
                **{n: statement.excluded[n] for n in FIELDS if n != "trail"},
                "updated_at": now,
                "retired": None,  # a trail written again is live again
            },
            where=statement.excluded.seq > _TABLE.c.seq,
        ).returning(_TABLE.c.id)  # a row comes back only when one was written (rowcount is -1
        # for an upsert under some drivers)
        return self._execute(statement, "record the audit anchor in") > 0

    def retire(self, trail: str, retired: str, mac: str) -> bool:
        """Mark a trail's row retired (``retired``: who, when, why) with its new signature; True
        when a row changed. StoreError when the store cannot be written."""
        table = _TABLE
        statement = update(table).where(table.c.trail == trail).values(retired=retired, mac=mac)
        statement = statement.returning(table.c.id)
        return self._execute(statement, "retire an audit anchor in") > 0

    def _execute(self, statement, what: str) -> int:  # noqa: ANN001
        try:
            with self._connect().connect() as conn:
                conn = conn.execution_options(**{WRITER_OPTION: True})
                with conn.begin():
                    return len(conn.execute(statement).all())
        except SQLAlchemyError as exc:
            reason = getattr(exc, "orig", None) or exc
            raise StoreError(f"cannot {what} {self.label}: {reason}") from None

    def rows(self, path: str | None = None, trail: str | None = None) -> list[dict]:
        """The rows of ``path`` or of ``trail`` (either matching), oldest first; StoreError."""
        table = _TABLE
        query = select(table).order_by(table.c.first_seen, table.c.id)
        wanted = []
        if path:
            wanted.append(table.c.path == path)
        if trail:
            wanted.append(table.c.trail == trail)
        if wanted:
            query = query.where(or_(*wanted))
        try:
            with self._connect().connect() as conn:
                return [dict(r._mapping) for r in conn.execute(query)]
        except SQLAlchemyError as exc:
            reason = getattr(exc, "orig", None) or exc
            raise StoreError(f"cannot read the audit anchors of {self.label}: {reason}") from None

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None
