"""The "Curation" tab: browse a finding's anchor sets, edit one as text, save it as a new
version, measure the edit's impact on the archive."""

from __future__ import annotations

import gradio as gr

from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.ui.account_bar import role_note
from chexretrieve.ui.curation import DraftDesk, NeedsConfirmation, sentences_html, set_as_text
from chexretrieve.ui.events import PRIVATE, attempt, who
from chexretrieve.ui.handlers import CaseLookup
from chexretrieve.ui.input_limits import (
    MAX_ANCHOR_KEY,
    MAX_CURATION_TEXT,
    MAX_DESCRIPTION,
    capped,
)
from chexretrieve.ui.lookup_tab import DEFAULT_FINDING, LookupTab
from chexretrieve.ui.render import esc, message_html


def build_curation_tab(
    app: gr.Blocks, curation: DraftDesk, lookup: CaseLookup, search: LookupTab
) -> None:
    """Lay out the tab and wire its events; a saved version of the search's finding is offered
    in the lookup tab's anchor-set dropdown at once."""
    with gr.Tab("Curation", id="curation"):
        # a user whose role may not edit sees why first, above the fold (issue 34, item 7)
        role_md = gr.HTML(elem_id="cur-role-note")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1):
                cur_finding = gr.Dropdown(
                    list(FINDINGS),
                    value=DEFAULT_FINDING,
                    label="Finding",
                    elem_id="cur-finding",
                )
                cur_keys = curation.set_choices(DEFAULT_FINDING)
                cur_set = gr.Dropdown(
                    cur_keys,
                    value=cur_keys[0] if cur_keys else None,
                    label="Anchor set",
                    elem_id="cur-set",
                )
                cur_edit = gr.Textbox(
                    label="Edit: one sentence per line, '+ ' positive, '- ' negative",
                    lines=16,
                    max_lines=40,
                    elem_id="cur-edit",
                )
                cur_desc = gr.Textbox(
                    label="What changed (saved with the new version)",
                    elem_id="cur-desc",
                )
                with gr.Row():  # draft -> impact against the version edited from -> publish
                    save_btn = gr.Button("Save draft", elem_id="cur-save")
                    impact_btn = gr.Button("Measure impact", elem_id="cur-impact")
                    publish_btn = gr.Button(
                        "Publish as new version", variant="primary", elem_id="cur-publish"
                    )
                    revert_btn = gr.Button("Revert to this version", elem_id="cur-revert")
                # shown only when publish needs the curator's confirmation (a measured harm)
                confirm_btn = gr.Button(
                    "Publish anyway", variant="stop", visible=False, elem_id="cur-publish-anyway"
                )
                cur_status = gr.Markdown(elem_id="cur-status")
            with gr.Column(scale=2):
                cur_table = gr.HTML(elem_id="cur-table")
                impact_md = gr.Markdown(elem_id="cur-impact-report")

    def problem(text: str) -> str:
        return f"<div class='cx-message cx-message-error' role='alert'>{esc(text)}</div>"

    def show_set(key):
        def act():
            if not key:
                return "", "", "", gr.skip()
            anchor_set_obj = curation.get(key)
            draft = curation.draft_of(key) if hasattr(curation, "draft_of") else None
            if draft is not None and draft.base == key:  # the saved draft of this version
                text = "\n".join(
                    f"{'+' if p == 'positive' else '-'} {t}" for t, p in draft.sentences
                )
                note = (
                    f"Draft of {esc(key)} loaded (saved {esc(draft.saved)} by {esc(draft.author)})."
                )
                return sentences_html(anchor_set_obj), text, "", note
            return sentences_html(anchor_set_obj), set_as_text(anchor_set_obj), "", gr.skip()

        return attempt(act, lambda t: (gr.skip(), gr.skip(), gr.skip(), problem(t)))

    def cur_finding_changed(fnd):
        def act():
            keys = curation.set_choices(fnd)
            return gr.update(choices=keys, value=keys[0] if keys else None), ""

        return attempt(act, lambda t: (gr.skip(), problem(t)))

    def checked_edit(key, text, description=""):
        """The caps of the curation inputs, before any work (a message otherwise)."""
        capped(key, "the anchor set", MAX_ANCHOR_KEY)
        capped(text, "the edited anchor set", MAX_CURATION_TEXT)
        capped(description, "the description", MAX_DESCRIPTION)

    def impact(key, text):
        """The edit in the box (saved as a draft or not) against the version it was edited from;
        an unchanged box measures the selected version against the one before it."""

        def act():
            checked_edit(key, text)
            return curation.draft_impact(key, text)

        return attempt(act, problem)

    def save_draft(key, text, description, request: gr.Request):
        def act():
            lookup.access.require(request, "edit_anchor_sets")  # on the server, from the user
            checked_edit(key, text, description)
            draft, problems = curation.save_draft(key, text, description, who(request))
            status = (
                f"Draft of **{esc(draft.set_id)}** saved (edited from {esc(draft.base)}); searches "
                "still use the published versions. Measure its impact, then publish."
            )
            if problems:
                status += "\n\nTo fix before publishing: " + " · ".join(esc(p) for p in problems)
            return status

        return attempt(act, problem)

    def published(saved, search_finding, what: str):
        new_set = curation.get(saved.key)
        keys = curation.set_choices(new_set.finding)
        search_update = gr.skip()
        if new_set.finding == canonical_finding(search_finding):
            search_choices, latest = lookup.anchor_set_choices(search_finding)
            search_update = gr.update(choices=search_choices, value=latest)
        status = f"{what} **{esc(saved.key)}** as `{esc(saved.path.name)}` · {esc(saved.summary)}"
        return (gr.update(choices=keys, value=saved.key), status, sentences_html(new_set),
                search_update)  # fmt: skip

    def publishing(confirmed: bool):
        def publish(key, text, description, search_finding, request: gr.Request):
            hidden = gr.update(visible=False)

            def act():
                lookup.access.require(request, "edit_anchor_sets")  # the curator role, here
                checked_edit(key, text, description)
                try:
                    saved = curation.publish(key, text, description, who(request), confirmed)
                except NeedsConfirmation as ask:  # a measured harm: the curator decides
                    shown = gr.update(visible=True)
                    return (gr.skip(), problem(str(ask)), gr.skip(), gr.skip(), shown)
                return (*published(saved, search_finding, "Published"), hidden)

            return attempt(act, lambda t: (gr.skip(), problem(t), gr.skip(), gr.skip(), hidden))

        return publish

    def revert(key, search_finding, request: gr.Request):
        def act():
            lookup.access.require(request, "edit_anchor_sets")
            capped(key, "the anchor set", MAX_ANCHOR_KEY)
            return published(curation.revert(key, who(request)), search_finding, "Reverted:")

        return attempt(act, lambda t: (gr.skip(), problem(t), gr.skip(), gr.skip()))

    shown = [cur_table, cur_edit, impact_md, cur_status]
    cur_set.change(show_set, cur_set, shown, **PRIVATE)
    for box in (cur_edit, cur_set):  # another edit or set: no confirmation pending any more
        box.change(lambda: gr.update(visible=False), None, confirm_btn, **PRIVATE)
    cur_finding.input(cur_finding_changed, cur_finding, [cur_set, cur_status], **PRIVATE)
    published_outputs = [cur_set, cur_status, cur_table, search.anchor_set]
    save_btn.click(save_draft, [cur_set, cur_edit, cur_desc], cur_status, **PRIVATE)
    publish_inputs = [cur_set, cur_edit, cur_desc, search.finding]
    publish_btn.click(publishing(False), publish_inputs, [*published_outputs, confirm_btn],
                      **PRIVATE)  # fmt: skip
    confirm_btn.click(publishing(True), publish_inputs, [*published_outputs, confirm_btn],
                      **PRIVATE)  # fmt: skip
    revert_btn.click(revert, [cur_set, search.finding], published_outputs, **PRIVATE)
    impact_btn.click(impact, [cur_set, cur_edit], impact_md, **PRIVATE)

    def page_loaded(fnd, request: gr.Request):
        """The sets as they are now: a version saved before a reload is listed and shown. A user
        whose role may not save sees, above everything, why; the buttons disabled and the edit
        boxes read-only (the handlers refuse anyway)."""
        note = role_note(lookup.access, request, "edit_anchor_sets")
        may_edit = note is None
        button = gr.update(interactive=may_edit)
        role = "" if may_edit else message_html(
            f"{note} The sets can be read and their impact measured; nothing can be changed.",
            "info",
        )  # fmt: skip
        editable = gr.update(interactive=may_edit)

        def act():
            keys = curation.set_choices(fnd)
            key = keys[0] if keys else None
            table, edit, report, status = show_set(key)
            edit = gr.update(value=edit, interactive=may_edit) if isinstance(edit, str) else edit
            return (gr.update(choices=keys, value=key), table, edit, report, status, button,
                    button, button, role, editable)  # fmt: skip

        def failed(text):
            return (gr.skip(), gr.skip(), editable, gr.skip(), problem(text), button, button,
                    button, role, editable)  # fmt: skip

        return attempt(act, failed)

    # save (a draft), publish and revert: all three are the curator's (disabled, with the reason)
    app.load(page_loaded, cur_finding,
             [cur_set, *shown, save_btn, publish_btn, revert_btn, role_md, cur_desc],
             **PRIVATE)  # fmt: skip
