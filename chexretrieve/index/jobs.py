"""Background jobs of the archive index in `serve`: one worker thread, one job per target.

A search for a (finding, geometry) the index lacks, a rank calibration of another top k, an
update after the store moved, a curator's publication, the repair of a file that failed its seal:
each is queued once (asking again returns the same job with its progress), run in order by one
worker thread that takes the folder's builder lock (so it also waits for an `index build` or an
ingest's update running in another process), and committed as a new generation that the next
search picks up. A failed job is logged and reported by the next request for it, which queues
it again.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class JobState:
    """Progress of one queued or running job."""

    key: tuple
    fraction: float = 0.0
    running: bool = False
    done: bool = False
    error: str = ""
    done_event: threading.Event = field(default_factory=threading.Event)

    def message(self, what: str) -> str:
        """What a search asking for the job's result is told meanwhile."""
        if self.error:
            return f"preparing {what} failed ({self.error}); search again to retry"
        where = "being prepared" if self.running else "queued to be prepared"
        return (
            f"{what} is {where} ({100 * self.fraction:.0f} %): the archive index computes it "
            "in the background and the search answers once it is ready; meanwhile search "
            "under the finding's default geometry"
        )


class IndexJobs:
    """The job queue of one ArchiveIndex (see the module text)."""

    def __init__(self, index):
        self.index = index
        self._queue: queue.Queue = queue.Queue()
        self._jobs: dict[tuple, JobState] = {}
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="chexretrieve-index-jobs",
                                        daemon=True)  # fmt: skip
        self._worker.start()

    def _submit(self, key: tuple, work: Callable) -> JobState:
        with self._lock:
            state = self._jobs.get(key)
            if state is not None and not state.done:
                return state
            if state is not None and state.error:
                log.info("retrying index job %s after: %s", key, state.error)
            state = self._jobs[key] = JobState(key)
        self._queue.put((state, work))
        return state

    def _run(self) -> None:
        while True:
            state, work = self._queue.get()
            state.running = True

            def progress(what: str, done: int, total: int, state=state) -> None:
                if total:
                    state.fraction = min(1.0, done / total)

            try:
                work(self.index.builder(progress))
            except Exception as exc:  # noqa: BLE001 - reported to the next request for it
                state.error = f"{type(exc).__name__}: {exc}"
                log.exception("index job %s failed", state.key)
            finally:
                state.running = False
                state.done = True
                state.done_event.set()
                with self._lock:
                    if not state.error:
                        self._jobs.pop(state.key, None)

    def state(self, key: tuple) -> JobState | None:
        with self._lock:
            return self._jobs.get(key)

    def pending(self) -> list[JobState]:
        with self._lock:
            return [s for s in self._jobs.values() if not s.done]

    def wait(self, timeout: float | None = None) -> None:
        """Until every job queued so far has ended (tests, benchmarks)."""
        for state in list(self._jobs.values()):
            state.done_event.wait(timeout)

    # --------------------------------------------------------------------------- jobs
    def entry(self, finding: str, geometry: str, anchor_key: str | None) -> JobState:
        key = ("entry", finding, geometry, anchor_key)
        return self._submit(key, lambda b: b.entry(finding, geometry, anchor_key))

    def calibration(self, finding: str, geometry: str, anchor_key: str, top_k: int) -> JobState:
        key = ("calibration", finding, geometry, anchor_key, top_k)
        return self._submit(key, lambda b: b.calibrate(finding, geometry, anchor_key, top_k))

    def update(self) -> JobState:
        return self._submit(("update",), lambda b: b.update())

    def publish(self, finding: str) -> JobState:
        """A curator published or reverted a version of ``finding``'s anchor set: its default
        geometry is built under the new latest version, then the finding switches to it."""
        geometry = self.index.config.default_geometry_of(finding)
        return self._submit(("publish", finding), lambda b: b.entry(finding, geometry, None))

    def repair(self, entry: dict | None) -> JobState:
        from chexretrieve.index.repair import rebuild_damaged

        key = ("repair", None if entry is None else entry["file"]["file"])
        return self._submit(key, lambda b: rebuild_damaged(self.index, entry, b.progress))
