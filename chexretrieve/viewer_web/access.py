"""Who may open which study in the OHIF viewer, and who may see its PHI.

A study is reachable only after the user reached it through a search: the search hands out a
*grant* (an unguessable token naming the user and the studies on that results page) and every
"Open in viewer" link carries it. Opening the link (``/viewer/open``) turns the grant into a
*viewer session* (a random id in an HttpOnly, SameSite=Strict cookie, kept on the server with
its user and allow-list); the DICOMweb endpoint then answers only for the studies of that
session's allow-list and only to that same user. Grants and sessions expire
(``GRANT_TTL_S``); at most ``MAX_ENTRIES`` of each are kept (the oldest go first).

With ``state`` (the store's :class:`chexretrieve.store.access_state.AccessState`) grants and
viewer sessions are rows of the store, under the SHA-256 of their token: a link made by one
server process opens in another, and a restart keeps them (issue 33). Without, they live in this
process's memory (tests; a store that cannot be written).

``may_see_phi(user, role, accounts)`` is the one place that decides whether headers are sent as
stored or de-identified (see ``chexretrieve.dicom.dicomweb``).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

#: seconds a grant or a viewer session stays valid
GRANT_TTL_S = 12 * 3600
#: grants (and sessions) kept at most
MAX_ENTRIES = 10_000
#: the roles that may see PHI when accounts exist
PHI_ROLES = frozenset({"admin", "radiologist"})
#: the cookie holding the viewer session id
SESSION_COOKIE = "chexretrieve-viewer"


def may_see_phi(user: str | None, role: str | None = None, accounts: bool = False) -> bool:
    """Whether ``user`` sees patient names, ids and the other identifying headers.

    Without user accounts (``accounts=False``: the local single user of ``serve``, with or
    without the shared login) the user is the archive's own clinician: PHI is shown. With
    accounts, only the roles in ``PHI_ROLES`` see it; every other role (and no role) gets
    de-identified headers. The lead wires ``role`` / ``accounts`` to the accounts module."""
    if not accounts:
        return True
    return role is not None and role.strip().lower() in PHI_ROLES


class _MemoryGrants:
    """Grants and viewer sessions in this process's memory, with the access state's methods."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._rows: dict[str, OrderedDict[str, tuple[str, set[str], float]]] = {
            "grant": OrderedDict(),
            "session": OrderedDict(),
        }
        self._lock = threading.Lock()

    def add_grant(self, kind: str, digest: str, user: str, studies, now: float) -> None:  # noqa: ANN001
        with self._lock:
            table = self._rows[kind]
            table[digest] = (user, set(studies), now)
            while len(table) > self.max_entries:
                table.popitem(last=False)

    def grant(self, kind: str, digest: str) -> tuple[str, set[str], float] | None:
        with self._lock:
            found = self._rows[kind].get(digest)
            return None if found is None else (found[0], set(found[1]), found[2])

    def extend_grant(self, digest: str, studies) -> None:  # noqa: ANN001
        with self._lock:
            found = self._rows["session"].get(digest)
            if found is not None:
                found[1].update(studies)

    def purge_grants(self, older_than: float, keep_at_most: int) -> int:
        with self._lock:
            removed = 0
            for table in self._rows.values():
                for key in [k for k, v in table.items() if v[2] < older_than]:
                    del table[key]
                    removed += 1
            return removed


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class ViewerAccess:
    """Grants from searches and the viewer sessions opened from them (thread-safe; in the store
    with ``state``, else in memory)."""

    def __init__(
        self,
        ttl_s: float = GRANT_TTL_S,
        max_entries: int = MAX_ENTRIES,
        state=None,  # noqa: ANN001 - chexretrieve.store.access_state.AccessState
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.table = state if state is not None else _MemoryGrants(max_entries)
        self.clock = clock
        self._made = 0

    def _live(self, kind: str, token: str | None) -> tuple[str, set[str], float] | None:
        if not token or len(token) > 256:
            return None
        found = self.table.grant(kind, _digest(token))
        if found is None or self.clock() - found[2] > self.ttl_s:
            return None
        return found

    def _put(self, kind: str, user: str, studies: set[str]) -> str:
        now = self.clock()
        self._made += 1
        if self._made % 100 == 1:
            self.table.purge_grants(now - self.ttl_s, self.max_entries)
        token = secrets.token_urlsafe(24)
        self.table.add_grant(kind, _digest(token), user, studies, now)
        return token

    def grant(self, user: str, study_uids: Iterable[str]) -> str:
        """A token letting ``user`` open these studies (a results page's query and results)."""
        return self._put("grant", str(user), {str(s) for s in study_uids if s})

    def open(
        self, token: str | None, user: str, studies: Iterable[str], session: str | None = None
    ) -> str:
        """The viewer session (an existing one of this user, else a new one) now allowed
        ``studies``; PermissionError unless the grant is live, is this user's and covers them."""
        wanted = {str(s) for s in studies}
        grant = self._live("grant", token)
        if grant is None:
            raise PermissionError("this viewer link has expired or is unknown: search again")
        if grant[0] != user:
            raise PermissionError("this viewer link was made for another user")
        if not wanted or not wanted <= grant[1]:
            raise PermissionError("the link names a study that its search did not show")
        current = self._live("session", session)
        if current is not None and current[0] == user:
            self.table.extend_grant(_digest(str(session)), wanted)
            return str(session)
        return self._put("session", user, wanted)

    def allowed(self, session: str | None, user: str, study_uid: str) -> bool:
        """Whether the viewer session may read ``study_uid`` for ``user``."""
        entry = self._live("session", session)
        return entry is not None and entry[0] == user and str(study_uid) in entry[1]

    def studies_of(self, session: str | None, user: str) -> set[str]:
        """The allow-list of a live session of ``user`` (empty otherwise)."""
        entry = self._live("session", session)
        return set(entry[1]) if entry is not None and entry[0] == user else set()
