"""Ingest: files -> decoded radiographs (worker processes) -> embeddings (batches) -> the store.

Order of work for one run:
1. find the files (``discover_files``) and stat them; files whose path, size and mtime match an
   image already embedded with this encoder are 'already-present' without being decoded again;
2. the rest are decoded in worker processes while the main process runs the encoder on the
   previous batch, so decoding hides behind inference;
3. each batch (images, embeddings, labels, the outcome of every file since the last batch) is
   written in ONE transaction. A killed run leaves whole batches only; the next run skips what is
   stored and finishes the job. The same SOPInstanceUID with other pixels is a 'conflict' and the
   stored image is kept.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from chexretrieve.datasets.entries import view_group_of
from chexretrieve.encoders.base import Encoder, split_preprocessing
from chexretrieve.ingest.config import IngestConfig
from chexretrieve.ingest.decode_pool import Decoded, DecodePool, InlineDecoder, Rejected
from chexretrieve.ingest.discover import Candidate, discover_files
from chexretrieve.ingest.labels import LabelTable
from chexretrieve.ingest.prepare import ingest_reader
from chexretrieve.ingest.stages import EncoderStage
from chexretrieve.ingest.thumbnails import thumbnail_of
from chexretrieve.store import BatchItem, ImageRecord, Outcome, SourceStamp, Store


class IngestError(RuntimeError):
    """The run cannot go on (broken encoder, database failure); committed batches are kept.

    ``report`` holds the outcomes recorded up to the stop (set by ``ingest_paths``).
    """

    report: IngestReport | None = None


@dataclass
class IngestReport:
    run_id: int
    database: str
    encoder_id: str
    started_at: str
    finished_at: str = ""
    status: str = "running"
    seconds: float = 0.0
    skipped_files: int = 0
    labels_file: str | None = None
    labelled_files: int = 0
    unmatched_label_rows: int = 0
    worker_restarts: int = 0
    # over files whose image was already stored: "labels", "splits", "metadata" changed, or
    # "unchanged" (a re-ingest's report of what it corrected)
    changes: collections.Counter = field(default_factory=collections.Counter)
    outcomes: list[Outcome] = field(default_factory=list)
    # patients of the store with images in more than one split: (how many, a few examples as
    # (patient id, its splits)); an evaluation across those splits refuses them
    patients_in_several_splits: tuple[int, tuple] = (0, ())

    @property
    def counts(self) -> dict[str, int]:
        found = collections.Counter(o.outcome for o in self.outcomes)
        names = ("ingested", "embedded", "already-present", "rejected", "conflict")
        return {name: found.get(name, 0) for name in names}

    @property
    def reasons(self) -> dict[str, int]:
        found = collections.Counter(
            o.reason for o in self.outcomes if o.outcome in ("rejected", "conflict")
        )
        return dict(sorted(found.items()))

    @property
    def problems(self) -> int:
        return sum(1 for o in self.outcomes if o.outcome in ("rejected", "conflict"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "database": self.database,
            "encoder_id": self.encoder_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "counts": self.counts,
            "reasons": self.reasons,
            "skipped_files": self.skipped_files,
            "labels_file": self.labels_file,
            "labelled_files": self.labelled_files,
            "unmatched_label_rows": self.unmatched_label_rows,
            "worker_restarts": self.worker_restarts,
            "changes_to_stored_images": {
                name: self.changes.get(name, 0)
                for name in ("labels", "splits", "metadata", "unchanged")
            },
            "byte_identical_copies": self.changes.get("copies", 0),
            "copies_in_another_split": self.changes.get("copies in another split", 0),
            "patients_in_several_splits": self.patients_in_several_splits[0],
            "files": [asdict(o) for o in self.outcomes],
        }


ProgressCallback = Callable[[int, int], None]  # (files done, files total)


def record_from_radiograph(
    radiograph: Any, path: Path, split: str | None, fields: dict | None = None
) -> ImageRecord:
    """The store's image record for a decoded radiograph (``chexretrieve.dicom.Radiograph``);
    ``fields`` (a data set's values: patient, study, view, ...) override the file's own."""
    meta = radiograph.metadata
    spacing = meta.pixel_spacing or (None, None)
    record = ImageRecord(
        sop_uid=meta.sop_uid,
        study_uid=meta.study_uid,
        pixel_sha256=radiograph.pixel_sha256,
        series_uid=meta.series_uid,
        patient_id=meta.patient_id,
        patient_sex=meta.patient_sex,
        patient_age_years=meta.patient_age_years,
        study_date=meta.study_date,
        view_position=meta.view_position,
        manufacturer=meta.manufacturer,
        body_part=meta.body_part,
        photometric=meta.photometric,
        modality=meta.modality,
        pixel_rows=meta.rows,
        pixel_columns=meta.columns,
        pixel_spacing_row_mm=spacing[0],
        pixel_spacing_col_mm=spacing[1],
        transfer_syntax=meta.transfer_syntax,
        source_format=meta.source_format,
        source_path=str(path),
        split=split,
        accession_number=getattr(meta, "accession_number", None),
        window_center=getattr(meta, "window_center", None),
        window_width=getattr(meta, "window_width", None),
        view_group=view_group_of(meta.view_position),
    )
    return replace(record, **fields) if fields else record


def entry_fields(row: Any, source_format: str | None) -> dict:
    """Image columns a matched labels row sets: a data-set entry's patient, study, view, ...
    (``chexretrieve.datasets.ImageEntry.image_fields``); none for a plain labels row."""
    if row is None or not hasattr(row, "image_fields"):
        return {}
    return row.image_fields(source_format)


def annotation_of(fields: dict, split: str | None) -> dict | None:
    """What a re-ingest sets on an image already stored: the data set's fields and the split."""
    values = dict(fields)
    if split is not None:
        values["split"] = split
    return values or None


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    return {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}.get(suffix, "dicom")


def default_read_config():  # noqa: ANN201
    from chexretrieve.dicom import ReadConfig

    return ReadConfig()


@dataclass
class _Pending:
    index: int
    candidate: Candidate
    stamp: SourceStamp | None
    radiograph: Any = None


@dataclass
class _Prepared:
    """A batch on its way through the encoder stage to the store."""

    batch: list[_Pending]
    items: list[BatchItem]
    indices: list[int]
    positions: list[int]  # items that need an embedding


class _Run:
    """State of one ingest run (kept out of the public function for readability)."""

    def __init__(self, store, encoder, config, labels, report, progress, embed_preprocessed=None):  # noqa: ANN001
        # set when the decoding workers hand over model inputs, not display pixels
        self.embed_preprocessed = embed_preprocessed
        self.store: Store = store
        self.encoder: Encoder = encoder
        self.config: IngestConfig = config
        self.labels: LabelTable | None = labels
        self.report = report
        self.progress = progress
        self.total = 0
        self.done = 0
        self.results: dict[int, Outcome] = {}
        self.decided: list[Outcome] = []
        self.decided_index: list[int] = []
        self.consecutive_embed_failures = 0

    # ------------------------------------------------------------------ bookkeeping
    def _advance(self, count: int) -> None:
        self.done += count
        if self.progress is not None:
            self.progress(self.done, self.total)

    def _labels_for(self, candidate: Candidate):  # noqa: ANN202
        if self.labels is None:
            return None
        return self.labels.match(candidate.path, candidate.root)

    def reject(self, index: int, candidate: Candidate, reason: str, message: str) -> None:
        self.decided.append(Outcome(str(candidate.path), "rejected", reason, message))
        self.decided_index.append(index)
        if len(self.decided) >= 256:
            self.write(self.prepare([]), {})

    # ------------------------------------------------------------------ writing
    def flush(self, batch: list[_Pending]) -> None:
        """Embed what needs it and write the batch plus pending rejections in one transaction."""
        prepared = self.prepare(batch)
        self.write(prepared, self.embed(prepared))

    def prepare(self, batch: list[_Pending]) -> _Prepared:
        """Store records, thumbnails and labels of a batch, and which images need an embedding."""
        items: list[BatchItem] = []
        indices: list[int] = []
        records: list[ImageRecord] = []
        for pending in batch:
            row = self._labels_for(pending.candidate)
            split = (row.split if row is not None else None) or self.config.split
            path = pending.candidate.path
            fields = entry_fields(row, pending.radiograph.metadata.source_format)
            records.append(record_from_radiograph(pending.radiograph, path, split, fields))
            items.append(
                BatchItem(
                    path=str(pending.candidate.path),
                    record=records[-1],
                    labels=row.labels if row is not None else None,
                    stamp=pending.stamp,
                    thumbnail=thumbnail_of(pending.radiograph, self.config.thumbnail_px),
                    annotation=annotation_of(fields, split),
                )
            )
            indices.append(pending.index)
            if row is not None and row.labels:
                self.report.labelled_files += 1
        return _Prepared(batch, items, indices, self._positions_needing_embedding(records))

    def embed(self, prepared: _Prepared) -> dict[int, str]:
        """Fill the embeddings (the encoder stage: may run on its own thread); the failures."""
        return self._embed(prepared.batch, prepared.items, prepared.positions)

    def write(self, prepared: _Prepared, failed: dict[int, str]) -> None:
        """Write an embedded batch and the rejections decided since the last write, in one
        transaction (the main thread only: it alone touches the store and the outcomes)."""
        batch, items, indices = prepared.batch, prepared.items, prepared.indices
        keep = [i for i in range(len(items)) if i not in failed]
        for position, message in failed.items():
            self.decided.append(Outcome(items[position].path, "rejected", "embed-error", message))
            self.decided_index.append(indices[position])
        written = self.store.write_batch(
            self.encoder.encoder_id,
            [items[i] for i in keep],
            run_id=self.report.run_id,
            extra_outcomes=self.decided,
            changes=self.report.changes,
        )
        for position, outcome in zip(keep, written, strict=True):
            self.results[indices[position]] = outcome
        for index, outcome in zip(self.decided_index, self.decided, strict=True):
            self.results[index] = outcome
        self._advance(len(batch) + len(self.decided) - len(failed))
        self.decided, self.decided_index = [], []
        for pending in batch:
            pending.radiograph = None  # free the pixels

    def _positions_needing_embedding(self, records: list[ImageRecord]) -> list[int]:
        known = self.store.find_images([r.sop_uid for r in records], self.encoder.encoder_id)
        seen: set[str] = set()
        positions = []
        for position, record in enumerate(records):
            if record.sop_uid in seen:
                continue  # a second copy in this batch: the first one carries the embedding
            seen.add(record.sop_uid)
            stored = known.get(record.sop_uid)
            if stored is None or (stored[1] == record.pixel_sha256 and not stored[2]):
                positions.append(position)
        return positions

    def _embed(self, batch, items, positions) -> dict[int, str]:  # noqa: ANN001
        """Fill items[p].embedding for p in positions; {position: message} for images that fail."""
        if not positions:
            return {}
        images = [batch[p].radiograph.pixels for p in positions]
        try:
            vectors = self._checked(self._embed_images(images), len(images))
            for p, vector in zip(positions, vectors, strict=True):
                items[p].embedding = vector
            self.consecutive_embed_failures = 0
            return {}
        except Exception:  # noqa: BLE001 - retried one by one to find the culprit
            pass
        failed: dict[int, str] = {}
        for p, image in zip(positions, images, strict=True):
            try:
                items[p].embedding = self._checked(self._embed_images([image]), 1)[0]
                self.consecutive_embed_failures = 0
            except Exception as exc:  # noqa: BLE001
                failed[p] = f"the encoder failed on this image: {type(exc).__name__}: {exc}"
                self.consecutive_embed_failures += 1
                if self.consecutive_embed_failures >= self.config.max_consecutive_embed_failures:
                    raise IngestError(
                        f"the encoder {self.encoder.encoder_id} failed on "
                        f"{self.consecutive_embed_failures} images in a row (last: {exc}); "
                        "stopping: the encoder, not the archive, is probably broken"
                    ) from exc
        return failed

    def _embed_images(self, images: list[np.ndarray]) -> np.ndarray:
        if self.embed_preprocessed is not None:  # model inputs prepared by the workers
            return self.embed_preprocessed(np.stack(images))
        return self.encoder.embed_images(images)

    def _checked(self, vectors: np.ndarray, n: int) -> np.ndarray:
        array = np.asarray(vectors, dtype=np.float32)
        if array.shape != (n, self.encoder.embed_dim) or not np.all(np.isfinite(array)):
            raise ValueError(
                f"encoder returned shape {array.shape} (finite: {np.all(np.isfinite(array))}); "
                f"expected ({n}, {self.encoder.embed_dim}) finite values"
            )
        return array


def ingest_paths(
    paths: Sequence[str | os.PathLike[str]],
    store: Store,
    encoder: Encoder,
    config: IngestConfig | None = None,
    *,
    labels: LabelTable | None = None,
    read_config: Any = None,
    reader: Callable[[str, Any], Any] | None = None,
    progress: ProgressCallback | None = None,
    only: Sequence[str | os.PathLike[str]] | None = None,
) -> IngestReport:
    """Ingest every file under ``paths`` into ``store`` with ``encoder``; the report lists every
    file's outcome. ValueError for a missing path; IngestError when the run cannot go on.
    ``only``: ingest just these of the files found (a shard of a distributed run; the folder
    arguments still decide label matching)."""
    config = config or IngestConfig()
    if config.gpu_jpeg:  # said before any work, in one line
        from chexretrieve.dicom.gpu_jpeg import GpuJpegUnavailable, check_gpu_jpeg

        try:
            check_gpu_jpeg()
        except GpuJpegUnavailable as exc:
            raise ValueError(str(exc)) from exc
    read_config = read_config if read_config is not None else default_read_config()
    discovery = discover_files(list(paths), config)
    candidates = discovery.candidates
    if only is not None:
        wanted = {Path(p).absolute() for p in only}
        candidates = [c for c in candidates if c.path in wanted]
    store.register_encoder(encoder.encoder_id, encoder.embed_dim, encoder.inv_temperature)
    settings = {
        "paths": [str(p) for p in paths],
        "labels": str(labels.source) if labels is not None else None,
        **asdict(config),
    }
    run_id = store.start_run(encoder.encoder_id, settings)
    started = time.perf_counter()
    report = IngestReport(
        run_id=run_id,
        database=store.label,
        encoder_id=encoder.encoder_id,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        skipped_files=discovery.skipped,
        labels_file=str(labels.source) if labels is not None else None,
    )
    split = None
    if config.preprocess_in_workers and not config.worker_memory_mb:
        split = split_preprocessing(encoder)  # a capped worker could not load the model's libraries
    reader = ingest_reader(config, split[0] if split else None, base=reader)
    run = _Run(store, encoder, config, labels, report, progress, split[1] if split else None)
    run.total = len(candidates)
    try:
        _execute(run, candidates, reader, read_config)
    except KeyboardInterrupt:
        _finish(run, report, started, "interrupted")
        raise
    except IngestError as exc:
        _finish(run, report, started, "failed")
        exc.report = report
        raise
    except Exception as exc:
        _finish(run, report, started, "failed")
        error = IngestError(
            f"the run stopped: {type(exc).__name__}: {exc}; committed batches are kept, run "
            "again to resume"
        )
        error.report = report
        raise error from exc
    _finish(run, report, started, "completed")
    return report


def _finish(run: _Run, report: IngestReport, started: float, status: str) -> None:
    report.outcomes = [run.results[i] for i in sorted(run.results)]
    report.status = status
    report.seconds = time.perf_counter() - started
    report.finished_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    if run.labels is not None:
        report.unmatched_label_rows = run.labels.unmatched_rows
    if status == "completed" and hasattr(run.store, "patients_in_several_splits"):
        report.patients_in_several_splits = run.store.patients_in_several_splits()
    try:
        run.store.finish_run(report.run_id, status, report.counts)
    except Exception:  # noqa: BLE001 - the original error matters more
        if status == "completed":
            raise


def _execute(run: _Run, candidates: list[Candidate], reader, read_config) -> None:  # noqa: ANN001
    config = run.config
    to_decode: list[_Pending] = []
    stamps: dict[int, SourceStamp] = {}
    for index, candidate in enumerate(candidates):
        try:
            info = candidate.path.stat()
            stamps[index] = SourceStamp(str(candidate.path), info.st_size, info.st_mtime_ns)
        except OSError as exc:
            run.reject(index, candidate, "unreadable", f"cannot stat the file: {exc.strerror}")
    unchanged = run.store.unchanged_sources(list(stamps.values()), run.encoder.encoder_id)
    shortcut: list[tuple[int, BatchItem]] = []
    for index, candidate in enumerate(candidates):
        if index not in stamps:
            continue
        image_id = unchanged.get(str(candidate.path))
        if image_id is None:
            to_decode.append(_Pending(index, candidate, stamps[index]))
            continue
        row = run._labels_for(candidate)
        if row is not None and row.labels:
            run.report.labelled_files += 1
        split = (row.split if row is not None else None) or run.config.split
        item = BatchItem(
            str(candidate.path),
            labels=row.labels if row is not None else None,
            stamp=stamps[index],
            known_image_id=image_id,
            annotation=annotation_of(entry_fields(row, _format_of(candidate.path)), split),
        )
        shortcut.append((index, item))
    for start in range(0, len(shortcut), 512):
        part = shortcut[start : start + 512]
        outcomes = run.store.write_batch(
            run.encoder.encoder_id,
            [item for _, item in part],
            run_id=run.report.run_id,
            changes=run.report.changes,
        )
        for (index, _), outcome in zip(part, outcomes, strict=True):
            run.results[index] = outcome
        run._advance(len(part))

    workers = config.resolved_workers
    if workers == 0 or not to_decode:
        decoder = InlineDecoder(reader, read_config)
    else:
        decoder = DecodePool(
            min(workers, len(to_decode)),
            reader,
            read_config,
            timeout_s=config.file_timeout_s,
            memory_mb=config.worker_memory_mb,
            start_method=config.start_method,
        )
    in_flight_limit = config.batch_size * (config.prefetch_batches + 1) + max(workers, 1)
    with decoder, EncoderStage(run, config.prefetch_batches, config.overlap_encoder) as stage:
        # results are taken in file order (a reorder buffer), so every batch holds the same images
        # as a one-file-at-a-time run: the same embeddings bit for bit, however workers interleave
        submitted = next_index = 0
        ready: dict[int, Decoded | Rejected] = {}
        batch: list[_Pending] = []
        while next_index < len(to_decode):
            while submitted < len(to_decode) and submitted - next_index < in_flight_limit:
                decoder.submit(submitted, str(to_decode[submitted].candidate.path))
                submitted += 1
            task_id, result = decoder.get()
            ready[task_id] = result
            while next_index in ready:
                result, pending = ready.pop(next_index), to_decode[next_index]
                next_index += 1
                if isinstance(result, Rejected):
                    run.reject(pending.index, pending.candidate, result.reason, result.message)
                elif isinstance(result, Decoded):
                    pending.radiograph = result.radiograph
                    batch.append(pending)
                if len(batch) >= config.batch_size or next_index == len(to_decode):
                    stage.submit(batch)
                    batch = []
            stage.write_finished()
        stage.drain()
        run.report.worker_restarts = decoder.restarts
    if run.decided:
        run.flush([])
