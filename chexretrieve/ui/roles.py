"""Who may do what in the UI. The accounts and their roles are another module's (issue 23's
"Trustworthy operation"); the UI asks only these questions, so that module is wired in here.

Until accounts are configured every user of a local server is its operator and may publish.
"""

from __future__ import annotations


def may_publish(user: str | None) -> bool:
    """Whether ``user`` may publish an anchor-set draft or revert a set (the curator role).
    True for every user while no accounts are configured (a local, single-user server)."""
    return True
