"""Searches in flight in this process, so that background work yields to them.

The search service marks each search (``FOREGROUND.searching()``); the archive index's background
check of its files (``chexretrieve.index.handle``) marks its thread (``FOREGROUND.yielding()``),
and each block it checks first waits until no search runs, at most ``YIELD_LIMIT_S``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: longest background work waits before each step while searches run (then it takes the step
#: anyway: a server that is never idle still gets its files checked)
YIELD_LIMIT_S = 0.05


class Foreground:
    """Searches in flight in this process: background checks wait between blocks while any
    runs (``searching`` marks one; ``yielding`` marks the calling thread as background)."""

    def __init__(self) -> None:
        self._running = 0
        self._idle = threading.Condition()
        self._background = threading.local()

    @contextmanager
    def searching(self) -> Iterator[None]:
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if self._running == 0:
                    self._idle.notify_all()

    @contextmanager
    def yielding(self) -> Iterator[None]:
        """Block checks made by this thread meanwhile wait for the searches (background work)."""
        self._background.on = True
        try:
            yield
        finally:
            self._background.on = False

    def wait_if_background(self) -> None:
        """In a background thread: until no search runs, at most YIELD_LIMIT_S; else nothing."""
        if getattr(self._background, "on", False):
            with self._idle:
                self._idle.wait_for(lambda: self._running == 0, timeout=YIELD_LIMIT_S)


#: this process's searches (the search service marks each; index.handle's check yields to them)
FOREGROUND = Foreground()
