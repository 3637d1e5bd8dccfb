"""What a `serve` process does to itself to stay small, and `serve --workers N`.

Each `serve` process maps the archive index, so the archive's pages are in memory once however
many processes serve it; what each process holds of its own is the Python of its imports and its
state, about 0.3 GB. Three things make that smaller:

- :func:`limit_malloc_arenas`: glibc gives each thread that allocates its own malloc arena, and
  each arena keeps what it freed; Gradio's handlers run on a pool of threads.
- :func:`skip_matplotlib_switch`: Gradio imports matplotlib around every event to switch its
  backend to Agg (about 20 MB, and 0.6 s on the first event); this app draws no matplotlib plot.
- :func:`serve_workers`: ``--workers N`` imports everything once, then forks N - 1 more serving
  processes, which share the imported code's pages copy-on-write until they write them.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace

log = logging.getLogger("chexretrieve.ui")

#: glibc's mallopt parameter number of the arena limit (malloc.h: M_ARENA_MAX)
M_ARENA_MAX = -8
#: arenas a serve process keeps (glibc's default is 8 per core)
SERVE_ARENAS = 2
#: modules `serve` imports while it opens the archive and answers its first events: imported
#: before the fork, so that every worker shares them
SERVING_MODULES = (
    "chexretrieve.ui.app",
    "chexretrieve.ui.waiting",
    "chexretrieve.ui.viewer_links",
    "chexretrieve.ui.web_guard",
    "chexretrieve.app.root",
    "chexretrieve.app.stores",
    "chexretrieve.index",
    "chexretrieve.index.handle",
    "chexretrieve.search.service",
    "chexretrieve.search.scoring",
    "chexretrieve.search.calibration",
    "chexretrieve.density.provider",
    "chexretrieve.store",
    "chexretrieve.store.access_state",
    "chexretrieve.dicom",
    "faiss",
    "PIL.Image",
    "PIL.PngImagePlugin",
    "uvicorn",
    "starlette.middleware",
)
#: seconds a worker gets to stop after SIGTERM before it is killed
STOP_GRACE_S = 10.0


def limit_malloc_arenas(count: int = SERVE_ARENAS) -> bool:
    """At most ``count`` glibc malloc arenas in this process (call before threads start);
    False where it cannot (not glibc) or the operator set ``MALLOC_ARENA_MAX`` (theirs wins)."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, int(count)))
    except (OSError, AttributeError):  # musl and others: no mallopt, or another name
        return False


class _NoBackendSwitch:
    """Stands in for Gradio's per-event matplotlib backend switch: nothing to switch."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


def skip_matplotlib_switch() -> bool:
    """Gradio's event handler no longer imports matplotlib and switches its backend around
    every event (this app draws no matplotlib plot). False, changing nothing, when this Gradio
    does not call the switch where this expects it (a test then fails)."""
    from gradio import route_utils, utils

    if "utils.MatplotlibBackendMananger()" not in inspect.getsource(route_utils.call_process_api):
        return False
    utils.MatplotlibBackendMananger = _NoBackendSwitch
    return True


def worker_ports(port: int, workers: int) -> list[int]:
    """The port of each worker: ``port``, ``port + 1``, ..."""
    return [port + i for i in range(workers)]


def serve_workers(config, serve: Callable) -> str | None:  # noqa: ANN001 - a UIConfig
    """``serve(config)`` in ``config.workers`` processes, worker i on ``config.port + i``; what
    stopped them when a worker ended on its own (None when they were stopped, as by Ctrl+C).

    This process imports what serving uses, freezes its objects out of the garbage collector's
    reach (so that collecting never writes their pages), forks the other workers and serves the
    first port itself. Nothing is open yet when it forks: each worker opens the store, the index
    and its threads on its own. When one worker stops, the others are stopped and the command
    ends with an error: a service manager restarts the whole group."""
    for name in SERVING_MODULES:
        importlib.import_module(name)
    if threading.active_count() > 1:  # a thread would be missing (and its locks held) in forks
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        raise RuntimeError(f"cannot fork serve workers while threads run: {names}")
    gc.collect()
    gc.freeze()
    parent = os.getpid()
    children: dict[int, int] = {}
    for port in worker_ports(config.port, config.workers)[1:]:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_worker(serve, replace(config, port=port, workers=1), parent)
        children[pid] = port
    stopping, ended = threading.Event(), []
    _stop_on_sigterm(stopping)
    watcher = threading.Thread(
        target=_watch_workers, args=(children, stopping, ended), name="chexretrieve-workers",
        daemon=True,
    )  # fmt: skip
    watcher.start()
    try:
        serve(replace(config, workers=1))
    except KeyboardInterrupt:  # SIGTERM, or a worker ended, before the page was up
        pass
    finally:
        stopping.set()
        _stop_workers(children)
    return ended[0] if ended else None


def _run_worker(serve: Callable, config, parent: int) -> None:  # noqa: ANN001
    """A forked worker: serve until stopped, then leave without running the parent's cleanup."""
    code = 0
    try:
        _die_with(parent)
        _stop_on_sigterm(threading.Event())
        serve(config)
    except KeyboardInterrupt:
        pass
    except BaseException:  # noqa: BLE001 - whatever happens, this process must end here
        log.exception("serve worker on port %s failed", config.port)
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with(parent: int) -> None:
    """SIGTERM to this process when the parent dies (Linux), and leave now if it already has."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        raise KeyboardInterrupt


def _stop_on_sigterm(stopping: threading.Event) -> None:
    """SIGTERM stops serving as Ctrl+C does (Gradio closes its server on KeyboardInterrupt),
    once: a second signal while stopping is ignored."""

    def handler(signum, frame):  # noqa: ANN001, ARG001
        if not stopping.is_set():
            stopping.set()
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _watch_workers(children: dict[int, int], stopping: threading.Event, ended: list) -> None:
    """Wait for the forked workers; one that ends while serving stops this process too (and
    ``ended`` says which)."""
    while children:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        port = children.pop(pid, None)
        if port is None or stopping.is_set():
            continue
        code = os.waitstatus_to_exitcode(status)
        ended.append(f"the serve worker on port {port} ended (exit code {code}); the others "
                     "were stopped")  # fmt: skip
        log.error("%s", ended[-1])
        os.kill(os.getpid(), signal.SIGTERM)


def _stop_workers(children: dict[int, int]) -> None:
    """SIGTERM to every worker still running; SIGKILL to any that has not ended in time."""
    import time

    for pid in list(children):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            children.pop(pid, None)
    deadline = time.monotonic() + STOP_GRACE_S
    while children and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
