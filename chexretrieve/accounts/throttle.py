"""Throttling of sign-in attempts per user name and per client address, kept in the store.

An attempt is *reserved* before its password is checked: in one write transaction of the store
(:meth:`chexretrieve.store.access_state.AccessState.reserve_attempt`) it is counted under the
name typed and under the client's address, or refused when either is waiting. Counting first
means that N guesses sent at once are N attempts, from one server process or several sharing the
store, and that a restart forgets nothing.

Each key may fail ``free`` times (``AccessConfig.user_free_failures`` per name,
``client_free_failures`` per address): the attempt that brings a key's count to ``free`` locks it
for ``first_delay_s``; each further failure doubles the wait (at most ``max_delay_s``), counted
from when that failure was answered. So with the default 5, five wrong passwords for one name
are checked and the sixth waits, whatever it is. A success clears its name's count and takes
back only its own attempt from the address's (a valid account of one's own does not reset the
address's count). A key quiet for ``failure_memory_s`` starts again from 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chexretrieve.accounts.state import UsesAccessState

#: attempts reserved by one process between two purges of old counts
PURGE_EVERY = 500


def delay_after(failures: int, free: int, first_delay_s: float, max_delay_s: float) -> float:
    """Seconds a key waits after its ``failures``-th failure: 0 below ``free``, then
    ``first_delay_s``, doubling with each further one, at most ``max_delay_s``."""
    if failures < free:
        return 0.0
    return min(max_delay_s, first_delay_s * 2.0 ** min(failures - free, 64))


def user_key(user: str | None) -> str | None:
    name = (user or "").strip().lower()[:128]
    return "user:" + name if name else None


def client_key(client: str | None) -> str | None:
    return "client:" + client[:64] if client else None


@dataclass
class Attempt:
    """One reserved (or refused) sign-in attempt."""

    user: str | None
    client: str | None
    allowed: bool
    # seconds until the next attempt may be checked (a refused attempt's wait)
    wait_s: float
    # key -> (count after this attempt, lock before it)
    counted: dict[str, tuple[int, float]] = field(default_factory=dict)
    # "user" / "client" -> seconds locked by this attempt's failure (filled by ``failed``)
    locked: dict[str, float] = field(default_factory=dict)


class LoginThrottle(UsesAccessState):
    """Sign-in attempts of a store's access state (``AccessState``), under ``config``."""

    def _keys(self, user: str | None, client: str | None) -> list[tuple[str, int]]:
        keys = []
        if user_key(user):
            keys.append((user_key(user), self.config.user_free_failures))
        if client_key(client):
            keys.append((client_key(client), self.config.client_free_failures))
        return keys

    def _delay(self, failures: int, free: int) -> float:
        return delay_after(failures, free, self.config.first_delay_s, self.config.max_delay_s)

    def wait_s(self, user: str | None, client: str | None) -> float:
        """Seconds before ``user`` from ``client`` may try again (0: now); reads only."""
        return self.state.wait_s([k for k, _ in self._keys(user, client)], self.clock())

    def reserve(self, user: str | None, client: str | None) -> Attempt:
        """Count one attempt of ``user`` from ``client`` before its password is checked; a
        refused attempt (``allowed`` False) must not be checked."""
        now, purge = self._now_and_due(PURGE_EVERY)
        if purge:
            self.state.purge_counts(now, self.config.failure_memory_s)
        keys = self._keys(user, client)
        if not keys:
            return Attempt(user, client, True, 0.0)
        found = self.state.reserve_attempt(keys, now, self._delay, self.config.failure_memory_s)
        return Attempt(user, client, found.allowed, found.wait_s, dict(found.counted))

    def failed(self, attempt: Attempt) -> float:
        """The attempt's password was wrong: each key at or past its free attempts waits from
        now; the wait the user sees (0 within the free attempts)."""
        now = self.clock()
        frees = dict(self._keys(attempt.user, attempt.client))
        locks = {}
        for key, (count, _) in attempt.counted.items():
            delay = self._delay(count, frees.get(key, count + 1))
            if delay > 0:
                locks[key] = now + delay
                attempt.locked[key.split(":", 1)[0]] = delay
        if locks:
            self.state.lock_keys(locks)
        return max([0.0, *attempt.locked.values()])

    def succeeded(self, attempt: Attempt) -> None:
        """The attempt signed in: the name's count is cleared, the address's own attempt given
        back (its other failures stay)."""
        name = user_key(attempt.user)
        if name:
            self.state.clear_keys([name])
        address = client_key(attempt.client)
        if address and address in attempt.counted:
            self.state.give_back({address: attempt.counted[address]}, self.clock())

    def failures(self, user: str | None = None, client: str | None = None) -> int:
        """Attempts counted for ``user`` (or ``client``) since the last success."""
        key = user_key(user) if user else client_key(client)
        return self.state.failures(key) if key else 0
