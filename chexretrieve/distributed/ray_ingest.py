"""Ingest on a Ray cluster: the files are split into contiguous shards, each shard is ingested by
the ordinary pipeline (``ingest_paths(..., only=shard)``) in a Ray task that loads the encoder and
opens the store itself, and the driver merges the shard reports.

Why shards of whole ingests rather than shipping pixels to remote encoders: decoding and embedding
are the costly steps and both scale out this way; every image's row, labels and embedding are
written by the same code as a local run (one transaction per batch, SOP-UID conflict rules, label
matching against the same folder arguments), so the store ends up with the same content; and a
shard is resumable like any run. The store must be reachable from every worker: PostgreSQL for a
real cluster, or a SQLite file on a shared disk for one machine (its single writer lock queues the
shards' transactions).

Each shard is one ingest run in the store; the driver records one more run, with the settings and
the total counts, whose id the merged report carries.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from chexretrieve.encoders.registry import TOKENIZER_ENV
from chexretrieve.encoders.stand_in import TEST_ENCODERS_ENV
from chexretrieve.ingest.config import IngestConfig
from chexretrieve.ingest.discover import discover_files
from chexretrieve.ingest.pipeline import IngestError, IngestReport

#: environment variables handed to the Ray workers (test stand-in encoders, CheXzero's tokenizer,
#: offline model hubs)
FORWARDED_ENV = (
    TEST_ENCODERS_ENV,
    TOKENIZER_ENV,
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "CHEXRETRIEVE_ANCHORS",
)


def _ingest_shard(paths, only, db_url, encoder_spec, device, config, labels, read_config):  # noqa: ANN001, ANN202
    """One shard, inside a Ray worker: open the store, load the encoder, ingest, report."""
    from chexretrieve.encoders.registry import load_encoder
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.store import StoreConfig, open_store

    store = open_store(db_url, StoreConfig(url=db_url, migrate_on_open=False))
    try:
        encoder = load_encoder(encoder_spec, device)
        try:
            return ingest_paths(
                paths, store, encoder, config, labels=labels, read_config=read_config, only=only
            )
        except IngestError as exc:
            return exc.report if exc.report is not None else str(exc)
    finally:
        store.close()


def shard_files(files: Sequence[Path], shards: int) -> list[list[Path]]:
    """Contiguous, near-equal shards in discovery order (none empty)."""
    shards = max(1, min(shards, len(files)))
    size, extra = divmod(len(files), shards)
    out, start = [], 0
    for index in range(shards):
        stop = start + size + (1 if index < extra else 0)
        out.append(list(files[start:stop]))
        start = stop
    return [shard for shard in out if shard]


def ingest_paths_with_ray(
    paths: Sequence[str | os.PathLike[str]],
    store,
    encoder,
    encoder_spec: str,
    config: IngestConfig | None = None,
    *,
    labels=None,
    read_config=None,
    device: str = "auto",
    progress: Callable[[int, int], None] | None = None,
    shards: int | None = None,
) -> IngestReport:
    """Ingest ``paths`` like ``ingest_paths`` with the shards running as Ray tasks.

    Uses the Ray cluster this process is connected to (``ray.init`` already called), else
    ``$RAY_ADDRESS``, else starts a local one. ``shards`` defaults to twice the cluster's CPUs.
    Decoding inside a shard runs in the task's own process (``workers=0``): Ray provides the
    parallelism.
    """
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--executor ray needs Ray: pip install 'chexretrieve[scale]' (or 'ray[data]')"
        ) from None
    config = config or IngestConfig()
    if read_config is None:
        from chexretrieve.ingest.pipeline import default_read_config

        read_config = default_read_config()
    started = time.perf_counter()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    discovery = discover_files(list(paths), config)
    files = [c.path for c in discovery.candidates]
    if store.dialect == "sqlite" and not Path(store.engine.url.database).is_absolute():
        raise ValueError("give the SQLite store as an absolute path so every Ray worker finds it")
    if not ray.is_initialized():
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        ray.init(
            address=os.environ.get("RAY_ADDRESS"),
            include_dashboard=False,
            runtime_env={"env_vars": env} if env else None,
        )
    cpus = int(ray.cluster_resources().get("CPU", 1))
    parts = shard_files(files, shards or 2 * cpus)
    store.register_encoder(encoder.encoder_id, encoder.embed_dim, encoder.inv_temperature)
    settings = {
        "paths": [str(p) for p in paths],
        "executor": "ray",
        "shards": len(parts),
        "labels": str(labels.source) if labels is not None else None,
        **dataclasses.asdict(config),
    }
    run_id = store.start_run(encoder.encoder_id, settings)
    shard_config = dataclasses.replace(config, workers=0)
    remote = ray.remote(num_cpus=1, max_retries=0)(_ingest_shard)
    url = store.config.url
    pending = {
        remote.remote(
            list(paths), part, url, encoder_spec, device, shard_config, labels, read_config
        ): part  # fmt: skip
        for part in parts
    }
    reports: list[IngestReport] = []
    errors: list[str] = []
    done = 0
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            part = pending.pop(ready[0])
            result = ray.get(ready[0])
            if isinstance(result, IngestReport):
                reports.append(result)
                if result.status != "completed":
                    errors.append(f"a shard stopped ({result.status})")
            else:
                errors.append(str(result))
            done += len(part)
            if progress is not None:
                progress(done, len(files))
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        store.finish_run(run_id, "interrupted", {})
        raise
    merged = _merge(reports, files, run_id, store, encoder, labels, discovery.skipped, started_at)
    merged.seconds = time.perf_counter() - started
    merged.status = "failed" if errors else "completed"
    store.finish_run(run_id, merged.status, merged.counts)
    if errors:
        error = IngestError(
            f"{len(errors)} of {len(parts)} shards failed (first: {errors[0]}); committed batches "
            "are kept, run again to resume"
        )
        error.report = merged
        raise error
    return merged


def _merge(reports, files, run_id, store, encoder, labels, skipped, started_at) -> IngestReport:  # noqa: ANN001
    order = {str(path): index for index, path in enumerate(files)}
    outcomes = [o for report in reports for o in report.outcomes]
    outcomes.sort(key=lambda o: order.get(o.path, len(order)))
    labelled = sum(report.labelled_files for report in reports)
    merged = IngestReport(
        run_id=run_id,
        database=store.label,
        encoder_id=encoder.encoder_id,
        started_at=started_at,
        finished_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        skipped_files=skipped,
        labels_file=str(labels.source) if labels is not None else None,
        labelled_files=labelled,
        unmatched_label_rows=max(0, len(labels.rows) - labelled) if labels is not None else 0,
        worker_restarts=sum(report.worker_restarts for report in reports),
        changes=sum((report.changes for report in reports), collections.Counter()),
        outcomes=outcomes,
    )
    missing = collections.Counter(order.keys()) - collections.Counter(o.path for o in outcomes)
    if missing:
        raise IngestError(f"{sum(missing.values())} files have no outcome after the shards ran")
    return merged
