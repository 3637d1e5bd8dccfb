"""The PACS ledger: what a DICOMweb ingest knows about each study and instance of one PACS.

``PacsLedger(store, source)`` keeps, per instance, its latest outcome (stored, rejected, conflict,
transfer-failed) and, per study, whether it is complete: a study becomes 'complete' only when
every instance the PACS listed for it arrived and was settled (stored, or rejected / in conflict
for what it contains). A study with an instance that failed to transfer, or that was not tried
yet, stays 'partial', so an interrupted transfer can never pass for a finished one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import insert, select, update

from chexretrieve.store import writes
from chexretrieve.store.queries import select_frame
from chexretrieve.store.schema import PACS_INSTANCE_STATUSES, PacsInstance, PacsStudy
from chexretrieve.store.store import Store

#: instance statuses that settle an instance for good (a retry would give the same answer)
SETTLED = ("stored", "rejected", "conflict")


@dataclass(frozen=True)
class InstanceOutcome:
    study_uid: str
    series_uid: str
    sop_uid: str
    # one of PACS_INSTANCE_STATUSES
    status: str
    reason: str | None = None
    detail: str | None = None
    image_id: int | None = None
    # whether this run transferred the instance (counts an attempt)
    transferred: bool = True


@dataclass(frozen=True)
class StudyState:
    status: str
    expected_instances: int
    stored_instances: int
    rejected_instances: int


class PacsLedger:
    """Per-instance outcomes and per-study completeness of one DICOMweb source."""

    def __init__(self, store: Store, source: str) -> None:
        if not source or len(source) > 255:
            raise ValueError(f"PACS source label {source!r} must be 1-255 characters")
        self.store = store
        self.source = source

    def record_instances(self, outcomes: Sequence[InstanceOutcome]) -> None:
        """Store each instance's latest outcome (one transaction)."""
        for outcome in outcomes:
            if outcome.status not in PACS_INSTANCE_STATUSES:
                raise ValueError(
                    f"instance status {outcome.status!r} is not one of {PACS_INSTANCE_STATUSES}"
                )
        if not outcomes:
            return
        now = writes.utc_now()
        with self.store._write() as conn:
            known: dict[str, tuple[int, int]] = {}
            for part in writes.chunks(sorted({o.sop_uid for o in outcomes})):
                rows = conn.execute(
                    select(PacsInstance.sop_uid, PacsInstance.id, PacsInstance.attempts).where(
                        PacsInstance.source == self.source, PacsInstance.sop_uid.in_(part)
                    )
                )
                known.update({sop: (row_id, attempts) for sop, row_id, attempts in rows})
            for o in outcomes:
                values = {
                    "study_uid": o.study_uid,
                    "series_uid": o.series_uid,
                    "status": o.status,
                    "reason": o.reason,
                    "detail": writes.storable_text(o.detail) if o.detail else None,
                    "image_id": o.image_id,
                    "updated_at": now,
                }
                if o.sop_uid in known:
                    row_id, attempts = known[o.sop_uid]
                    attempts += int(o.transferred)
                    conn.execute(
                        update(PacsInstance)
                        .where(PacsInstance.id == row_id)
                        .values(attempts=attempts, **values)
                    )
                    known[o.sop_uid] = (row_id, attempts)
                else:
                    result = conn.execute(
                        insert(PacsInstance).values(
                            source=self.source,
                            sop_uid=o.sop_uid,
                            attempts=int(o.transferred),
                            **values,
                        )
                    )
                    known[o.sop_uid] = (int(result.inserted_primary_key[0]), int(o.transferred))

    def instance_statuses(self, sop_uids: Iterable[str]) -> dict[str, str]:
        """sop_uid -> latest status, for the instances recorded."""
        found: dict[str, str] = {}
        with self.store._read() as conn:
            for part in writes.chunks(sorted(set(sop_uids))):
                rows = conn.execute(
                    select(PacsInstance.sop_uid, PacsInstance.status).where(
                        PacsInstance.source == self.source, PacsInstance.sop_uid.in_(part)
                    )
                )
                found.update(dict(rows.all()))
        return found

    def settle_study(self, study_uid: str, expected: Iterable[str], run_id: int | None) -> str:
        """Mark the study 'complete' when every expected instance is settled, else 'partial';
        returns the status."""
        expected = set(expected)
        statuses = self.instance_statuses(expected)
        stored = sum(1 for sop in expected if statuses.get(sop) == "stored")
        rejected = sum(1 for sop in expected if statuses.get(sop) in ("rejected", "conflict"))
        complete = bool(expected) and stored + rejected == len(expected)
        status = "complete" if complete else "partial"
        now = writes.utc_now()
        values = {
            "status": status,
            "expected_instances": len(expected),
            "stored_instances": stored,
            "rejected_instances": rejected,
            "run_id": run_id,
            "updated_at": now,
        }
        with self.store._write() as conn:
            row = conn.execute(
                select(PacsStudy.id, PacsStudy.status, PacsStudy.completed_at).where(
                    PacsStudy.source == self.source, PacsStudy.study_uid == study_uid
                )
            ).first()
            if row is None:
                conn.execute(
                    insert(PacsStudy).values(
                        source=self.source,
                        study_uid=study_uid,
                        completed_at=now if complete else None,
                        **values,
                    )
                )
            else:
                completed_at = (row.completed_at or now) if complete else None
                conn.execute(
                    update(PacsStudy)
                    .where(PacsStudy.id == row.id)
                    .values(completed_at=completed_at, **values)
                )
        return status

    def study_state(self, study_uid: str) -> StudyState | None:
        with self.store._read() as conn:
            row = conn.execute(
                select(
                    PacsStudy.status,
                    PacsStudy.expected_instances,
                    PacsStudy.stored_instances,
                    PacsStudy.rejected_instances,
                ).where(PacsStudy.source == self.source, PacsStudy.study_uid == study_uid)
            ).first()
        return None if row is None else StudyState(*row)

    def studies_frame(self) -> pd.DataFrame:
        stmt = (
            select(
                PacsStudy.study_uid,
                PacsStudy.status,
                PacsStudy.expected_instances,
                PacsStudy.stored_instances,
                PacsStudy.rejected_instances,
                PacsStudy.run_id,
                PacsStudy.completed_at,
            )
            .where(PacsStudy.source == self.source)
            .order_by(PacsStudy.study_uid)
        )
        with self.store._read() as conn:
            return select_frame(conn, stmt)

    def instances_frame(self, study_uid: str | None = None) -> pd.DataFrame:
        stmt = select(
            PacsInstance.study_uid,
            PacsInstance.series_uid,
            PacsInstance.sop_uid,
            PacsInstance.status,
            PacsInstance.reason,
            PacsInstance.detail,
            PacsInstance.attempts,
            PacsInstance.image_id,
        ).where(PacsInstance.source == self.source)
        if study_uid is not None:
            stmt = stmt.where(PacsInstance.study_uid == study_uid)
        stmt = stmt.order_by(PacsInstance.study_uid, PacsInstance.sop_uid)
        with self.store._read() as conn:
            return select_frame(conn, stmt)
