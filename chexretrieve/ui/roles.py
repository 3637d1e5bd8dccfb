"""Who may publish anchor sets, for callers of ``DraftDesk`` outside the web page.

The case lookup's Curation tab checks the signed-in account's role itself
(``CaseLookup.access.require(request, "edit_anchor_sets")``: curator or admin, and the operator of
a server without accounts) before it publishes or reverts. ``DraftDesk.publish`` and ``revert``
also ask ``may_publish``, a hook for other callers (scripts, tests): every user may unless it is
replaced.
"""

from __future__ import annotations


def may_publish(user: str | None) -> bool:
    """Whether ``user`` may publish an anchor-set draft or revert a set (the curator role).
    True for every user: the web page has checked the account's role already."""
    return True
