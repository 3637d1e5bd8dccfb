"""Decoding files in worker processes, with a per-file timeout and recovery from crashed workers.

The main process submits (task id, path) pairs and takes back results in completion order while
it runs the encoder, so decoding overlaps inference. A background thread of the main process feeds
the workers (a few tasks ahead each), receives their results as soon as they are ready (workers
never block on a busy main thread), kills a worker whose current file runs past the timeout, and
replaces workers that die (a codec segfault, the memory cap): the file it was decoding is rejected
with reason 'timeout' or 'worker-crash', the files queued behind it go to the new worker.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from chexretrieve.ingest.shared_pixels import PixelReceiver, PixelSlots

#: a reader turns (path, read config) into a decoded radiograph or raises RejectedFile
Reader = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Decoded:
    radiograph: Any  # chexretrieve.dicom.Radiograph (pixels, metadata, pixel_sha256)


@dataclass(frozen=True)
class Rejected:
    reason: str
    message: str


class PreprocessFailed(ValueError):
    """The encoder's preprocessing refused a decoded image (reported as 'embed-error')."""

    reason = "embed-error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PreprocessingReader:
    """A reader whose radiographs carry the encoder's model input in place of the display pixels
    (``chexretrieve.encoders.base.split_preprocessing``): the decoding worker resizes, pads and
    normalises, the main process only runs the model, and a few hundred kB cross between them
    instead of the full image. Picklable when ``reader`` and ``preprocess`` are."""

    reader: Reader  # path, read config -> Radiograph
    preprocess: Callable[[Any], Any]  # display pixels -> model input (float32 array)

    def __call__(self, path: str, read_config: Any) -> Any:
        radiograph = self.reader(path, read_config)
        _one_torch_thread_per_worker()
        scale = getattr(radiograph, "scale", 1)
        try:
            if scale > 1:  # a working-resolution read (chexretrieve.ingest.prepare)
                meta = radiograph.metadata
                source = (meta.rows, meta.columns)
                model_input = self.preprocess.from_working(radiograph.pixels, source, scale)
            else:
                model_input = self.preprocess(radiograph.pixels)
        except Exception as exc:  # noqa: BLE001 - any refusal of the model's preprocessing
            raise PreprocessFailed(
                f"the encoder's preprocessing failed on this image: {type(exc).__name__}: {exc}"
            ) from exc
        return dataclasses.replace(radiograph, pixels=model_input)


def _one_torch_thread_per_worker() -> None:
    """Decoding workers share the cores with the model: torch ops in a worker use one thread
    (the main process, which runs the model, is left alone)."""
    global _THREADS_LIMITED
    if _THREADS_LIMITED or multiprocessing.parent_process() is None:
        return
    _THREADS_LIMITED = True
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


_THREADS_LIMITED = False


def decode_one(reader: Reader, path: str, read_config: Any) -> Decoded | Rejected:
    """Run the reader on one file; every failure becomes a Rejected with a reason code."""
    try:
        return Decoded(reader(path, read_config))
    except MemoryError:
        return Rejected("too-large", "decoding ran out of memory (worker memory cap)")
    except RecursionError:
        return Rejected("too-deep", "nesting too deep to parse")
    except ValueError as exc:  # RejectedFile is a ValueError with .reason and .message
        reason = getattr(exc, "reason", None)
        if reason is not None:
            return Rejected(reason, getattr(exc, "message", str(exc)))
        return Rejected("decode-error", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a reader bug must not end the run
        where = traceback.extract_tb(exc.__traceback__)[-1:]
        place = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        return Rejected("decode-error", f"unexpected {type(exc).__name__}: {exc}{place}")


def _worker_main(  # noqa: ANN001
    tasks: Connection, results: Connection, reader, read_config, memory_mb: int, slots: int
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    pixel_slots = PixelSlots(slots)
    if memory_mb > 0:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):
            return  # the main process is gone
        if task is None:
            pixel_slots.close()
            return
        task_id, path = task
        try:
            results.send(("start", task_id))
            result, shared = pixel_slots.export(decode_one(reader, path, read_config))
            results.send(("done", task_id, result, shared))
        except (BrokenPipeError, OSError):
            return


@dataclass
class _Worker:
    process: Any
    tasks: Connection
    results: Connection
    assigned: collections.deque  # (task id, path), the first one is being decoded
    receiver: PixelReceiver  # the worker's shared-memory blocks, attached here
    started_at: float | None = None  # when the first assigned task started


class DecodePool:
    """``submit(task_id, path)`` then ``get()`` -> (task_id, Decoded | Rejected), any order."""

    def __init__(
        self,
        workers: int,
        reader: Reader,
        read_config: Any,
        *,
        timeout_s: float,
        memory_mb: int = 0,
        start_method: str = "spawn",
        tasks_per_worker: int = 2,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a decode pool needs at least one worker, got {workers}")
        self._context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # workers fork from a server that has already imported the reader: restarts after a
            # timeout or crash take milliseconds instead of a fresh interpreter's seconds
            modules = ["chexretrieve.ingest.decode_pool", getattr(reader, "__module__", None)]
            self._context.set_forkserver_preload([m for m in modules if m])
        self._reader = reader
        self._read_config = read_config
        self._timeout_s = timeout_s
        self._memory_mb = memory_mb
        self._tasks_per_worker = tasks_per_worker
        self._pending: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._results: queue.Queue = queue.Queue()
        self._wake_read, self._wake_write = socket.socketpair()
        self._stop = False
        self._error: BaseException | None = None
        self.restarts = 0
        self._failures: collections.Counter = collections.Counter()
        self._workers = [self._spawn() for _ in range(workers)]
        self._thread = threading.Thread(target=self._run, name="decode-pool", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------- main-thread API
    def submit(self, task_id: int, path: str) -> None:
        with self._lock:
            self._pending.append((task_id, path))
        self._wake()

    def get(self, timeout: float | None = None) -> tuple[int, Decoded | Rejected]:
        """The next finished task; queue.Empty after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._error is not None:
                raise RuntimeError(f"decode pool failed: {self._error}") from self._error
            wait_s = 0.5 if deadline is None else min(0.5, max(0.0, deadline - time.monotonic()))
            try:
                return self._results.get(timeout=wait_s)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def close(self) -> None:
        self._stop = True
        self._wake()
        self._thread.join(timeout=10)
        for worker in self._workers:
            try:
                worker.tasks.send(None)
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=2)
            for conn in (worker.tasks, worker.results):
                conn.close()
            worker.receiver.release_all()
        self._wake_read.close()
        self._wake_write.close()

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------- background thread
    def _wake(self) -> None:
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass

    def _spawn(self) -> _Worker:
        task_read, task_write = self._context.Pipe(duplex=False)
        result_read, result_write = self._context.Pipe(duplex=False)
        _widen_pipe(result_read)
        process = self._context.Process(
            target=_worker_main,
            args=(
                task_read,
                result_write,
                self._reader,
                self._read_config,
                self._memory_mb,
                self._tasks_per_worker,  # ring slots: never fewer than tasks outstanding
            ),
            daemon=True,
            name="chexretrieve-decode",
        )
        process.start()
        task_read.close()
        result_write.close()
        return _Worker(process, task_write, result_read, collections.deque(), PixelReceiver())

    def _run(self) -> None:
        try:
            while not self._stop:
                self._assign()
                self._poll()
                self._enforce_timeouts()
        except BaseException as exc:  # noqa: BLE001 - surfaced to the main thread by get()
            self._error = exc

    def _assign(self) -> None:
        for worker in self._workers:
            while len(worker.assigned) < self._tasks_per_worker:
                with self._lock:
                    if not self._pending:
                        return
                    task = self._pending.popleft()
                worker.assigned.append(task)
                try:
                    worker.tasks.send(task)
                except OSError:
                    break  # the worker died; _poll notices through its sentinel

    def _poll(self) -> None:
        waitables: list[Any] = [self._wake_read]
        for worker in self._workers:
            waitables += [worker.results, worker.process.sentinel]
        for ready in wait(waitables, timeout=self._next_wait()):
            if ready is self._wake_read:
                self._wake_read.recv(4096)
                continue
            for index, worker in enumerate(self._workers):
                if ready is worker.results:
                    self._receive(index)
                elif ready == worker.process.sentinel:
                    self._drain_then_replace(index)

    def _next_wait(self) -> float:
        now = time.monotonic()
        waits = [0.5]
        for worker in self._workers:
            if worker.started_at is not None and worker.assigned:
                waits.append(max(0.0, worker.started_at + self._timeout_s - now))
        return min(waits)

    def _receive(self, index: int) -> None:
        worker = self._workers[index]
        try:
            message = worker.results.recv()
        except Exception:  # noqa: BLE001 - EOF, or a message cut short by the worker's death
            self._drain_then_replace(index)
            return
        self._handle(worker, message)

    def _handle(self, worker: _Worker, message: tuple) -> None:
        if message[0] == "start":
            worker.started_at = time.monotonic()
            return
        _, task_id, result, shared = message
        if shared is not None:
            try:
                result = worker.receiver.receive(result, shared)
            except (OSError, ValueError) as exc:
                result = Rejected("decode-error", f"pixels lost between processes: {exc}")
        if worker.assigned and worker.assigned[0][0] == task_id:
            worker.assigned.popleft()
        worker.started_at = None
        self._results.put((task_id, result))

    def _drain_then_replace(self, index: int) -> None:
        worker = self._workers[index]
        # results the worker sent before it died are still in the pipe
        try:
            while worker.results.poll():
                self._handle(worker, worker.results.recv())
        except Exception:  # noqa: BLE001 - EOF, or a message cut short by the worker's death
            pass
        worker.process.join(timeout=5)
        if worker.process.is_alive():
            return
        code = worker.process.exitcode
        self._replace(index, "worker-crash", f"the decoding process died (exit code {code})")

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for index, worker in enumerate(self._workers):
            if worker.started_at is None or not worker.assigned:
                continue
            if now - worker.started_at > self._timeout_s:
                worker.process.kill()
                worker.process.join(timeout=5)
                self._replace(
                    index,
                    "timeout",
                    f"decoding took longer than {self._timeout_s:g} s; the worker was stopped",
                )

    def _replace(self, index: int, reason: str, message: str) -> None:
        worker = self._workers[index]
        if worker.assigned:
            task_id, _ = worker.assigned[0]
            self._failures[task_id] += 1
            # the file being decoded is to blame; one that had not started gets a second chance
            if worker.started_at is not None or self._failures[task_id] > 1:
                worker.assigned.popleft()
                self._results.put((task_id, Rejected(reason, message)))
        with self._lock:
            self._pending.extendleft(reversed(worker.assigned))
        for conn in (worker.tasks, worker.results):
            conn.close()
        worker.receiver.release_all()
        self._workers[index] = self._spawn()
        self.restarts += 1


def _widen_pipe(connection: Connection) -> None:
    """Ask Linux for a 1 MiB pipe buffer (default 64 KiB): a 14 MB image then crosses in ~15
    writer/reader hand-overs instead of ~220, which matters on a busy machine."""
    try:
        import fcntl

        set_pipe_size = getattr(fcntl, "F_SETPIPE_SZ", 1031)
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(connection.fileno(), set_pipe_size, min(limit, 1 << 20))
    except (OSError, ValueError, ImportError):
        pass  # not Linux, or not allowed: the default buffer still works


class InlineDecoder:
    """The same interface, decoding in the calling thread (workers = 0): no timeout, no overlap."""

    def __init__(self, reader: Reader, read_config: Any) -> None:
        self._reader = reader
        self._read_config = read_config
        self._pending: collections.deque = collections.deque()
        self.restarts = 0

    def submit(self, task_id: int, path: str) -> None:
        self._pending.append((task_id, path))

    def get(self, timeout: float | None = None) -> tuple[int, Decoded | Rejected]:
        if not self._pending:
            raise queue.Empty
        task_id, path = self._pending.popleft()
        return task_id, decode_one(self._reader, path, self._read_config)

    def close(self) -> None:
        self._pending.clear()

    def __enter__(self) -> InlineDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
