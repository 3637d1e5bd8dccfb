"""The base of what keeps its state in the store's access tables (sessions, sign-in counts)."""

from __future__ import annotations

import time
from collections.abc import Callable

from chexretrieve.accounts.config import AccessConfig


class UsesAccessState:
    """``state``: a :class:`chexretrieve.store.access_state.AccessState`; ``config``: the sign-in
    settings; ``clock``: UTC seconds (shared by every process on the store)."""

    def __init__(
        self,
        state,  # noqa: ANN001 - a chexretrieve.store.access_state.AccessState
        config: AccessConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.state = state
        self.config = config or AccessConfig()
        self.clock = clock or time.time
        self._calls = 0

    def _now_and_due(self, every: int) -> tuple[float, bool]:
        """The time now, and whether this call is one of each ``every`` (a purge is due)."""
        self._calls += 1
        return self.clock(), self._calls % every == 1
