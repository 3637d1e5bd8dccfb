"""The encoder stage of ingest: the model runs on its own thread, between decoding and the store.

The main thread receives decoded images from the worker processes, prepares each batch (records,
labels, thumbnails, which images need an embedding: store reads) and hands it to one encoder thread
through a bounded queue (``IngestConfig.prefetch_batches`` batches in flight). While the model runs
(torch releases the GIL inside its kernels, and on CUDA the thread waits on the device), the main
thread goes on receiving the next batch's images and writes finished batches, oldest first, one
transaction each. Only the main thread touches the store and the run's outcomes, so the
write order, the resume after a kill (whole batches only) and the report are those of the one-batch-
at-a-time loop; a batch embedded but not yet written when the run stops is simply done again by the
next run.
"""

from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class EncoderStage:
    """``submit(batch)`` queues a decoded batch for the encoder; ``write_finished()`` writes the
    batches whose embeddings are done; ``drain()`` waits for and writes the rest."""

    def __init__(self, run: Any, depth: int, overlap: bool) -> None:
        self._run = run  # the pipeline's _Run: prepare / embed / write
        self._depth = max(1, depth)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ingest-encoder") if overlap else None
        self._in_flight: collections.deque[tuple[Any, Future]] = collections.deque()

    def submit(self, batch: list) -> None:
        prepared = self._run.prepare(batch)
        if self._pool is None:
            self._run.write(prepared, self._run.embed(prepared))
            return
        while len(self._in_flight) >= self._depth:  # bounded: the oldest batch first
            self._write_oldest()
        self._in_flight.append((prepared, self._pool.submit(self._run.embed, prepared)))

    def write_finished(self) -> None:
        while self._in_flight and self._in_flight[0][1].done():
            self._write_oldest()

    def drain(self) -> None:
        while self._in_flight:
            self._write_oldest()

    def _write_oldest(self) -> None:
        prepared, future = self._in_flight.popleft()
        self._run.write(prepared, future.result())  # an encoder error surfaces here

    def __enter__(self) -> EncoderStage:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:  # unwritten batches are dropped: the next run redoes them
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._in_flight.clear()
