"""Who may do what in the UI. The accounts and their roles are another module's (issue 23's
"Trustworthy operation"); the UI asks only these questions, so that module is wired in here.

The case lookup's handlers check the signed-in user's role on the server before they save a
draft, publish or revert (``AccessControl.require(request, "edit_anchor_sets")``,
chexretrieve.ui.access); this function is the answer for callers of ``DraftDesk`` without a
request (library use, a local single-user server), where every user is the operator.
"""

from __future__ import annotations


def may_publish(user: str | None) -> bool:
    """Whether ``user`` may publish an anchor-set draft or revert a set (the curator role).
    True for every user while no accounts are configured (a local, single-user server)."""
    return True
