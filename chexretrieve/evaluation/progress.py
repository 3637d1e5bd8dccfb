"""A rich progress bar that can be switched off (tests, nested runs)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class _Silent:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def progress_bar(enabled: bool = True):
    """Yield a rich ``Progress`` (or a silent stand-in when ``enabled`` is false)."""
    if not enabled:
        yield _Silent()
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        yield progress


#: messages already shown by ``announce`` in this process
_ANNOUNCED: set[str] = set()


def announce(message: str, enabled: bool = True) -> None:
    """Say once per process, on stderr, what slow work is starting and why (a cache miss)."""
    if not enabled or message in _ANNOUNCED:
        return
    _ANNOUNCED.add(message)
    from rich.console import Console

    Console(stderr=True).print(f"[cyan]{message}[/]", highlight=False)
