"""The Store's record of ingest runs: one row per run (host, process, settings, final counts)
and one outcome per file (a mixin of ``Store``)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, Sequence

import pandas as pd
from sqlalchemy import insert, select, update

from chexretrieve.store import writes
from chexretrieve.store.queries import process_alive, select_frame
from chexretrieve.store.records import Outcome
from chexretrieve.store.schema import OUTCOMES, RUN_STATUSES, IngestOutcome, IngestRun


class IngestRuns:
    """The Store's ingest-run methods (a mixin: it uses ``Store._read`` / ``_write``)."""

    def start_run(self, encoder_id: str | None, settings: Mapping) -> int:
        """A new ingest run in status 'running'; runs of this host whose process is gone become
        'interrupted'."""
        host, pid = socket.gethostname(), os.getpid()
        with self._write() as conn:
            stale = conn.execute(
                select(IngestRun.id, IngestRun.pid).where(
                    IngestRun.status == "running", IngestRun.host == host
                )
            ).all()
            dead = [run_id for run_id, run_pid in stale if not process_alive(run_pid)]
            if dead:
                conn.execute(
                    update(IngestRun).where(IngestRun.id.in_(dead)).values(status="interrupted")
                )
            result = conn.execute(
                insert(IngestRun).values(
                    started_at=writes.utc_now(),
                    status="running",
                    host=host,
                    pid=pid,
                    encoder_id=encoder_id,
                    settings_json=json.dumps(dict(settings), default=str, sort_keys=True),
                )
            )
            return int(result.inserted_primary_key[0])

    def finish_run(self, run_id: int, status: str, counts: Mapping[str, int]) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"run status {status!r} is not one of {RUN_STATUSES}")
        with self._write() as conn:
            conn.execute(
                update(IngestRun)
                .where(IngestRun.id == run_id)
                .values(
                    status=status,
                    finished_at=writes.utc_now(),
                    counts_json=json.dumps(dict(counts), sort_keys=True),
                )
            )

    def record_outcome(self, run_id: int, outcome: Outcome) -> None:
        self.record_outcomes(run_id, [outcome])

    def record_outcomes(self, run_id: int, outcomes: Sequence[Outcome]) -> None:
        for o in outcomes:
            if o.outcome not in OUTCOMES:
                raise ValueError(f"outcome {o.outcome!r} is not one of {OUTCOMES}")
        with self._write() as conn:
            writes.record_outcomes(conn, run_id, outcomes)

    def runs_frame(self) -> pd.DataFrame:
        stmt = select(
            IngestRun.id,
            IngestRun.started_at,
            IngestRun.finished_at,
            IngestRun.status,
            IngestRun.encoder_id,
            IngestRun.counts_json,
        ).order_by(IngestRun.id)
        with self._read() as conn:
            return select_frame(conn, stmt)

    def outcomes_frame(self, run_id: int | None = None) -> pd.DataFrame:
        stmt = select(
            IngestOutcome.run_id,
            IngestOutcome.path,
            IngestOutcome.outcome,
            IngestOutcome.reason,
            IngestOutcome.detail,
            IngestOutcome.sop_uid,
            IngestOutcome.image_id,
        ).order_by(IngestOutcome.id)
        if run_id is not None:
            stmt = stmt.where(IngestOutcome.run_id == run_id)
        with self._read() as conn:
            return select_frame(conn, stmt)
