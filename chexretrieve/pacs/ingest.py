"""Pulling studies from a PACS over DICOMweb into the store, resumably.

For each study (the ones named, else every study QIDO lists, from ``since`` on):
1. QIDO lists its series (series of modalities not read are never transferred) and their
   instances: these are the study's *expected* instances;
2. instances already stored with this encoder's embedding, or settled before (rejected or in
   conflict for what they contain), are not transferred again; instances already in the spool
   folder (written whole: temporary file + rename) are not downloaded again;
3. the rest are retrieved with WADO-RS into ``spool/<study>/<series>/<sop>.dcm``;
4. every ``flush_instances`` transferred files (at study boundaries) go through the ordinary
   ingest (``ingest_paths``: decode, embed, one transaction per batch), and each instance's outcome
   is written to the PACS ledger; then each study is settled: 'complete' only when every expected
   instance is stored or settled, else 'partial'.
When the PACS stops answering (``PacsUnavailable``), what was transferred is ingested and settled
first, so a rerun resumes where this one stopped and duplicates nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexretrieve.pacs.client import (
    DicomWebSource,
    InstanceMissing,
    PacsError,
    PacsUnavailable,
    is_uid,
)
from chexretrieve.pacs.config import DicomWebConfig

STORED_OUTCOMES = ("ingested", "embedded", "already-present")


@dataclass
class DicomWebReport:
    source: str
    started_at: str
    status: str = "running"  # completed, interrupted (PACS down) or failed
    message: str = ""
    seconds: float = 0.0
    studies: dict[str, str] = field(default_factory=dict)  # study uid -> partial / complete
    studies_skipped: int = 0  # already complete, nothing new listed
    studies_not_found: list[str] = field(default_factory=list)
    expected_instances: int = 0
    transferred: int = 0
    reused_from_spool: int = 0
    already_stored: int = 0
    transfer_failures: list[dict] = field(default_factory=list)
    retries: int = 0
    runs: list[Any] = field(default_factory=list)  # IngestReport of every flush

    @property
    def problems(self) -> int:
        return len(self.transfer_failures) + sum(run.problems for run in self.runs)

    def to_dict(self) -> dict[str, Any]:
        complete = sum(1 for s in self.studies.values() if s == "complete")
        return {
            "source": self.source,
            "started_at": self.started_at,
            "status": self.status,
            "message": self.message,
            "seconds": round(self.seconds, 3),
            "studies_complete": complete,
            "studies_partial": len(self.studies) - complete,
            "studies_skipped": self.studies_skipped,
            "studies_not_found": self.studies_not_found,
            "expected_instances": self.expected_instances,
            "transferred": self.transferred,
            "reused_from_spool": self.reused_from_spool,
            "already_stored": self.already_stored,
            "retries": self.retries,
            "transfer_failures": self.transfer_failures,
            "studies": self.studies,
            "runs": [run.to_dict() for run in self.runs],
        }


@dataclass
class _Instance:
    study_uid: str
    series_uid: str
    sop_uid: str
    path: Path


TransferProgress = Callable[[int, int], None]  # (instances handled, instances known so far)


class _Pull:
    def __init__(
        self, config, source, store, encoder, ingest_config, read_config, report, progress
    ) -> None:  # noqa: ANN001
        from chexretrieve.store.pacs import PacsLedger

        self.config: DicomWebConfig = config
        self.source: DicomWebSource = source
        self.store = store
        self.encoder = encoder
        self.ingest_config = ingest_config
        self.read_config = read_config
        self.report: DicomWebReport = report
        self.progress = progress
        self.ledger = PacsLedger(store, config.source_label)
        self.pending: list[_Instance] = []
        self.open_studies: dict[str, set[str]] = {}
        self.failed: list[Any] = []  # InstanceOutcome of transfer failures not yet recorded
        self.known = 0
        self.handled = 0

    def _tick(self, count: int = 1) -> None:
        self.handled += count
        if self.progress is not None:
            self.progress(self.handled, self.known)

    # ------------------------------------------------------------------------ one study
    def pull_study(self, study_uid: str) -> None:
        from chexretrieve.store.pacs import InstanceOutcome

        if not is_uid(study_uid):
            raise PacsError(f"{study_uid!r} is not a DICOM UID (digits and dots, <= 64 chars)")
        expected: dict[str, str] = {}  # sop uid -> series uid
        series_list = self.source.series(study_uid)
        if not series_list:
            self.report.studies_not_found.append(study_uid)
            return
        wanted = self.config.modalities
        for series in series_list:
            if wanted is not None and (series.modality or "").upper() not in wanted:
                continue
            for sop in self.source.instances(study_uid, series.series_uid):
                expected[sop] = series.series_uid
        if not expected:
            return  # nothing this reader would take (e.g. a CT study)
        self.report.expected_instances += len(expected)
        state = self.ledger.study_state(study_uid)
        if state is not None and state.status == "complete":
            if state.expected_instances == len(expected):
                self.report.studies_skipped += 1
                return
        stored = self.store.find_images(list(expected), self.encoder.encoder_id)
        embedded = {sop for sop, (_, _, has) in stored.items() if has}
        statuses = self.ledger.instance_statuses(expected)
        newly_known = [
            InstanceOutcome(
                study_uid, expected[sop], sop, "stored", image_id=stored[sop][0], transferred=False
            )
            for sop in sorted(embedded)
            if statuses.get(sop) != "stored"
        ]
        self.ledger.record_instances(newly_known)
        self.report.already_stored += len(embedded)
        settled = {sop for sop, status in statuses.items() if status in ("rejected", "conflict")}
        to_get = [sop for sop in sorted(expected) if sop not in embedded and sop not in settled]
        self.known += len(to_get)
        self.open_studies[study_uid] = set(expected)
        try:
            for sop in to_get:
                self._transfer(
                    _Instance(
                        study_uid,
                        expected[sop],
                        sop,
                        self._spool_path(study_uid, expected[sop], sop),
                    )
                )
        finally:
            if len(self.pending) >= self.config.flush_instances:
                self.flush()

    def _spool_path(self, study_uid: str, series_uid: str, sop_uid: str) -> Path:
        return self.config.spool_dir / study_uid / series_uid / f"{sop_uid}.dcm"

    def _transfer(self, instance: _Instance) -> None:
        from chexretrieve.store.pacs import InstanceOutcome

        def failure(reason: str, detail: str) -> None:
            self.failed.append(
                InstanceOutcome(
                    instance.study_uid,
                    instance.series_uid,
                    instance.sop_uid,
                    "transfer-failed",
                    reason,
                    detail,
                )
            )
            self.report.transfer_failures.append(
                {
                    "study_uid": instance.study_uid,
                    "sop_uid": instance.sop_uid,
                    "reason": reason,
                    "detail": detail,
                }
            )
            self._tick()

        if not (is_uid(instance.series_uid) and is_uid(instance.sop_uid)):
            failure("bad-uid", "the PACS listed a UID that is not a DICOM UID; not retrieved")
            return
        if instance.path.is_file():
            self.report.reused_from_spool += 1
            self.pending.append(instance)
            self._tick()
            return
        try:
            data = self.source.retrieve(instance.study_uid, instance.series_uid, instance.sop_uid)
        except InstanceMissing as exc:
            failure("not-found", str(exc))
            return
        except PacsUnavailable as exc:
            failure("pacs-unavailable", str(exc))
            raise
        except PacsError as exc:
            failure("bad-response", str(exc))
            return
        _write_whole(instance.path, data)
        self.report.transferred += 1
        self.pending.append(instance)
        self._tick()

    # ------------------------------------------------------------------------ ingest + settle
    def flush(self) -> None:
        """Ingest the transferred files, record every instance's outcome, settle the studies."""
        from chexretrieve.ingest.pipeline import IngestError, ingest_paths
        from chexretrieve.store.pacs import InstanceOutcome

        outcomes = list(self.failed)
        self.failed = []
        if self.pending:
            by_path = {str(i.path.absolute()): i for i in self.pending}
            try:
                run = ingest_paths(
                    [i.path for i in self.pending],
                    self.store,
                    self.encoder,
                    self.ingest_config,
                    read_config=self.read_config,
                )
            except IngestError as exc:
                if exc.report is not None:
                    self.report.runs.append(exc.report)
                raise
            self.report.runs.append(run)
            for outcome in run.outcomes:
                instance = by_path.get(outcome.path)
                if instance is None:
                    continue
                if outcome.outcome in STORED_OUTCOMES:
                    status = "stored"
                elif outcome.outcome == "conflict":
                    status = "conflict"
                else:
                    status = "rejected"
                outcomes.append(
                    InstanceOutcome(
                        instance.study_uid,
                        instance.series_uid,
                        instance.sop_uid,
                        status,
                        outcome.reason,
                        outcome.detail,
                        outcome.image_id,
                    )
                )
            run_id = run.run_id
        else:
            run_id = None
        self.ledger.record_instances(outcomes)
        for study_uid, expected in self.open_studies.items():
            self.report.studies[study_uid] = self.ledger.settle_study(study_uid, expected, run_id)
        self.pending, self.open_studies = [], {}


def _write_whole(path: Path, data: bytes) -> None:
    """Write a file so that it either exists complete or not at all (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.part")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def ingest_dicomweb(
    config: DicomWebConfig,
    store,
    encoder,
    ingest_config=None,
    *,
    read_config=None,
    session=None,
    progress: TransferProgress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> DicomWebReport:
    """Pull the configured studies into ``store``; the report says what happened to each.

    Raises PacsError for problems that waiting will not fix (credentials, TLS, bad UIDs). When the
    PACS stops answering the report comes back with status 'interrupted' (everything transferred
    until then is ingested and settled); run again to resume.
    """
    from chexretrieve.ingest.config import IngestConfig

    started = time.perf_counter()
    report = DicomWebReport(
        source=config.source_label,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    source = DicomWebSource(config, session=session, sleep=sleep)
    ingest_config = ingest_config or IngestConfig()
    store.register_encoder(encoder.encoder_id, encoder.embed_dim, encoder.inv_temperature)
    pull = _Pull(config, source, store, encoder, ingest_config, read_config, report, progress)
    try:
        studies = list(config.studies) if config.studies else source.studies()
        for study_uid in studies:
            pull.pull_study(study_uid)
        pull.flush()
        report.status = "completed"
    except PacsUnavailable as exc:
        pull.flush()
        report.status, report.message = "interrupted", str(exc)
    except Exception as exc:
        report.status, report.message = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        report.retries = source.retries
        report.seconds = time.perf_counter() - started
    return report
