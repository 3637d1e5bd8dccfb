"""Roles and what each may do: the one place the server asks before an action.

radiologist: search and view studies. curator: as radiologist, and edit and save anchor sets.
admin: as curator, and manage accounts and export the audit trail. A server without accounts
(loopback only, the operator at the machine) acts as :data:`LOCAL_ROLE`.
"""

from __future__ import annotations

ROLES = ("radiologist", "curator", "admin")

#: action -> least role that may do it
ACTIONS = {
    "search": "radiologist",
    "view": "radiologist",
    "edit_anchor_sets": "curator",
    "manage_accounts": "admin",
    "export_audit": "admin",
}

#: what each action is called in a refusal
ACTION_WORDS = {
    "search": "searching the archive",
    "view": "viewing studies",
    "edit_anchor_sets": "saving an anchor-set version",
    "manage_accounts": "managing accounts",
    "export_audit": "exporting the audit trail",
}

#: the role of a server without accounts (bound to loopback, one operator)
LOCAL_ROLE = "curator"


class AccessRefused(ValueError):
    """An action the signed-in user's role does not allow (its text says which role would)."""


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    return role


def may(role: str | None, action: str) -> bool:
    """Whether ``role`` may do ``action`` (an unknown role or action may do nothing)."""
    if role not in ROLES or action not in ACTIONS:
        return False
    return ROLES.index(role) >= ROLES.index(ACTIONS[action])


def require(role: str | None, action: str, user: str | None = None) -> None:
    """AccessRefused unless ``role`` may do ``action``."""
    if may(role, action):
        return
    who = f"{user} is signed in as {role}" if user and role else "you are not signed in"
    if user and role is None:
        who = f"{user} has no active account"
    need = ACTIONS.get(action, "admin")
    raise AccessRefused(
        f"{ACTION_WORDS.get(action, action)} needs the {need} role; {who} "
        "(an admin can change it with `chexretrieve users role`)"
    )
