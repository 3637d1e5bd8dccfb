"""Throttling of sign-in attempts: per user name and per client address, exponential delay.

Each key (a user name typed, a client address) may fail ``free`` times; after that every further
failure makes the key wait ``first_delay_s * 2**(extra failures - 1)`` seconds (at most
``max_delay_s``) before its next attempt is even checked. A success clears the user's and the
client's count. Kept in the server's memory: a restart forgets it (documented).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from chexretrieve.accounts.config import AccessConfig

#: keys remembered at most (the oldest quiet ones are dropped beyond it)
MAX_KEYS = 50_000


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    allowed_at: float = 0.0


class LoginThrottle:
    """Counts failed sign-ins; ``wait_s`` says how long an attempt must still wait."""

    def __init__(
        self, config: AccessConfig | None = None, clock: Callable[[], float] | None = None
    ):
        self.config = config or AccessConfig()
        self.clock = clock or time.monotonic
        self._keys: dict[str, _Failures] = {}
        self._lock = threading.Lock()

    def _keys_of(self, user: str | None, client: str | None) -> list[tuple[str, int]]:
        keys = []
        if user:
            keys.append(("user:" + user.strip().lower()[:128], self.config.user_free_failures))
        if client:
            keys.append(("client:" + client, self.config.client_free_failures))
        return keys

    def wait_s(self, user: str | None, client: str | None) -> float:
        """Seconds before ``user`` from ``client`` may try again (0: now)."""
        now = self.clock()
        with self._lock:
            waits = [
                self._keys[k].allowed_at - now
                for k, _ in self._keys_of(user, client)
                if k in self._keys
            ]
        return max([0.0, *waits])

    def failed(self, user: str | None, client: str | None) -> float:
        """Count one failure; the wait it causes (0 within the free failures)."""
        now = self.clock()
        with self._lock:
            if len(self._keys) >= MAX_KEYS:
                self._forget_quiet(now)
            for key, free in self._keys_of(user, client):
                entry = self._keys.setdefault(key, _Failures())
                entry.count += 1
                entry.last = now
                extra = entry.count - free
                if extra > 0:
                    delay = min(
                        self.config.max_delay_s, self.config.first_delay_s * 2 ** (extra - 1)
                    )
                    entry.allowed_at = now + delay
        return self.wait_s(user, client)

    def succeeded(self, user: str | None, client: str | None) -> None:
        with self._lock:
            for key, _ in self._keys_of(user, client):
                self._keys.pop(key, None)

    def failures(self, user: str | None = None, client: str | None = None) -> int:
        """Failures counted for ``user`` (or ``client``) since its last success."""
        with self._lock:
            counts = [
                self._keys[k].count for k, _ in self._keys_of(user, client) if k in self._keys
            ]
        return max([0, *counts])

    def _forget_quiet(self, now: float) -> None:
        horizon = 2 * self.config.max_delay_s
        for key in [k for k, v in self._keys.items() if now - v.last > horizon]:
            del self._keys[key]
        if len(self._keys) >= MAX_KEYS:  # all recent: drop the oldest half
            for key in sorted(self._keys, key=lambda k: self._keys[k].last)[: MAX_KEYS // 2]:
                del self._keys[key]
