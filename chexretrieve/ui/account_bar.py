"""Who is signed in, shown on the page: "Signed in as ana · curator · Sign out".

Filled at page load from the request's user (``AccessControl.role_of``); empty without sign-in.
The page also disables what the user's role may not do (the server refuses it anyway):
:func:`role_note` is the line the curation tab shows beside its disabled save button.
"""

from __future__ import annotations

import gradio as gr

from chexretrieve.accounts.roles import ACTION_WORDS, ACTIONS, may
from chexretrieve.ui.access import AccessControl
from chexretrieve.ui.events import PRIVATE
from chexretrieve.ui.render import esc


def account_html(access: AccessControl, request) -> str:  # noqa: ANN001 - a gr.Request
    """Escaped HTML of the signed-in user, their role and a sign-out link ("" without sign-in)."""
    if access.mode == "none":
        return ""
    user = access.user_of(request)
    role = access.role_of(request)
    if not user:
        return ""
    out = (
        ""
        if access.mode == "header"
        else " · <a href='logout'>Sign out</a> · <a href='logout?everywhere=1'>"
        "Sign out everywhere</a>"
    )
    return (
        f"<div class='cx-account'>Signed in as <b>{esc(user)}</b> · "
        f"{esc(role or 'no active account')}{out}</div>"
    )


def role_note(access: AccessControl, request, action: str) -> str | None:  # noqa: ANN001
    """Why the signed-in user may not do ``action`` (None when they may)."""
    role = access.role_of(request)
    if may(role, action):
        return None
    return (
        f"{ACTION_WORDS[action].capitalize()} needs the {ACTIONS[action]} role; "
        f"you are signed in as {role or 'no active account'}."
    )


def build_account_bar(app: gr.Blocks, access: AccessControl) -> None:
    """The bar (call inside ``gr.Blocks``), filled when the page loads."""
    bar = gr.HTML("", elem_id="account-bar")

    def shown(request: gr.Request) -> str:
        return account_html(access, request)

    app.load(shown, None, bar, **PRIVATE, show_progress="hidden")
