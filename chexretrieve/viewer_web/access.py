"""Who may open which study in the OHIF viewer, and who may see its PHI.

A study is reachable only after the user reached it through a search: the search hands out a
*grant* (an unguessable token naming the user and the studies on that results page) and every
"Open in viewer" link carries it. Opening the link (``/viewer/open``) turns the grant into a
*viewer session* (a random id in an HttpOnly, SameSite=Strict cookie, kept on the server with
its user and allow-list); the DICOMweb endpoint then answers only for the studies of that
session's allow-list and only to that same user. Grants and sessions expire
(``GRANT_TTL_S``); at most ``MAX_ENTRIES`` of each are kept (the oldest go first).

``may_see_phi(user, role, accounts)`` is the one place that decides whether headers are sent as
stored or de-identified (see ``chexretrieve.dicom.dicomweb``).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

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


@dataclass
class _Entry:
    user: str
    studies: set[str]
    created: float = field(default_factory=lambda: time.monotonic())


class ViewerAccess:
    """Grants from searches and the viewer sessions opened from them (thread-safe, in memory)."""

    def __init__(self, ttl_s: float = GRANT_TTL_S, max_entries: int = MAX_ENTRIES):
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._grants: OrderedDict[str, _Entry] = OrderedDict()
        self._sessions: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def _live(self, table: OrderedDict[str, _Entry], key: str | None) -> _Entry | None:
        entry = table.get(key) if key else None
        if entry is not None and time.monotonic() - entry.created > self.ttl_s:
            del table[key]
            return None
        return entry

    def _put(self, table: OrderedDict[str, _Entry], entry: _Entry) -> str:
        key = secrets.token_urlsafe(24)
        table[key] = entry
        while len(table) > self.max_entries:
            table.popitem(last=False)
        return key

    def grant(self, user: str, study_uids: Iterable[str]) -> str:
        """A token letting ``user`` open these studies (a results page's query and results)."""
        studies = {str(s) for s in study_uids if s}
        with self._lock:
            return self._put(self._grants, _Entry(str(user), studies))

    def open(
        self, token: str | None, user: str, studies: Iterable[str], session: str | None = None
    ) -> str:
        """The viewer session (an existing one of this user, else a new one) now allowed
        ``studies``; PermissionError unless the grant is live, is this user's and covers them."""
        wanted = {str(s) for s in studies}
        with self._lock:
            grant = self._live(self._grants, token)
            if grant is None:
                raise PermissionError("this viewer link has expired or is unknown: search again")
            if grant.user != user:
                raise PermissionError("this viewer link was made for another user")
            if not wanted or not wanted <= grant.studies:
                raise PermissionError("the link names a study that its search did not show")
            current = self._live(self._sessions, session)
            if current is not None and current.user == user:
                current.studies |= wanted
                return str(session)
            return self._put(self._sessions, _Entry(user, set(wanted)))

    def allowed(self, session: str | None, user: str, study_uid: str) -> bool:
        """Whether the viewer session may read ``study_uid`` for ``user``."""
        with self._lock:
            entry = self._live(self._sessions, session)
            return entry is not None and entry.user == user and str(study_uid) in entry.studies

    def studies_of(self, session: str | None, user: str) -> set[str]:
        """The allow-list of a live session of ``user`` (empty otherwise)."""
        with self._lock:
            entry = self._live(self._sessions, session)
            return set(entry.studies) if entry is not None and entry.user == user else set()
