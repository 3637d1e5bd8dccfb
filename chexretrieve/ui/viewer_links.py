"""The OHIF viewer wired into the case lookup: the gate's middleware and the results' links.

``viewer_middleware(blocks, lookup, config)`` is the ASGI middleware ``launch_app`` puts in front
of the Gradio server (``chexretrieve.viewer_web.gate.ViewerGate``), with the Gradio login as its
notion of who is signed in; it also sets ``lookup.viewer_links`` so every results page carries
"Open in viewer" links (one grant per page: its query's study and its results' studies).
Without an installed OHIF (and no ``ohif_dir`` asked for) nothing is added: no links, no routes
but a 404 that says how to install it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from starlette.middleware import Middleware

from chexretrieve.ui.config import UIConfig
from chexretrieve.viewer_web.access import ViewerAccess, may_see_phi
from chexretrieve.viewer_web.dicomweb import DicomWebEndpoint
from chexretrieve.viewer_web.gate import ViewerGate, viewer_url
from chexretrieve.viewer_web.ohif import OhifSite, find_ohif

log = logging.getLogger("chexretrieve.ui")


def gradio_user(blocks, request) -> str | None:  # noqa: ANN001
    """Who the Gradio app knows as signed in for ``request``: its login's user (the same
    session cookie as the case lookup), or the local ``anonymous@<address>`` when the app has no
    login (the name ``chexretrieve.ui.events.who`` gives its events)."""
    server = getattr(blocks, "server_app", None)
    if getattr(blocks, "auth", None) is None:
        client = request.client.host if request.client else "unknown"
        return f"anonymous@{client}"
    if server is None:
        return None
    cookie_id = getattr(server, "cookie_id", "")
    token = request.cookies.get(f"access-token-{cookie_id}") or request.cookies.get(
        f"access-token-unsecure-{cookie_id}"
    )
    user = getattr(server, "tokens", {}).get(token)
    return str(user) if user else None


def user_sees_phi(user: str, access=None) -> bool:  # noqa: ANN001
    """The PHI rule: without accounts (``access`` None or sign-in "none": the local user of
    ``serve``) PHI is shown; with accounts (sign-in "accounts" or "header") only the roles of
    ``chexretrieve.viewer_web.access.PHI_ROLES`` see it, by the user's role in the store."""
    if access is None or access.mode == "none":
        return may_see_phi(user, role=None, accounts=False)
    return may_see_phi(user, role=access.book.active_role(user), accounts=True)


def signed_in_user(blocks, request, access=None) -> str | None:  # noqa: ANN001
    """Who is signed in for ``request`` under the server's sign-in mode: the trusted proxy's
    header in "header" mode, else the Gradio session (``gradio_user``)."""
    if access is not None and access.mode == "header":
        return access.auth_dependency()(request)
    return gradio_user(blocks, request)


_STUDIES_CACHE: dict[str, object] = {}


def archive_studies(lookup):  # noqa: ANN001
    """{study uid: [(image id, file path)]} of the archive as the search service holds it (built
    once per gallery version: the gallery's metadata object and its length); for an archive
    index's gallery, a lookup of one study at a time in its columns."""
    gallery = lookup.gallery
    if getattr(gallery, "mapped", False):
        return _StudyColumns(gallery)
    meta = gallery.metadata
    key = (id(meta), len(meta))
    if _STUDIES_CACHE.get("key") == key:
        return _STUDIES_CACHE["studies"]
    found: dict[str, list[tuple[int, str]]] = {}
    for image_id, study, path in zip(
        meta.index, meta["study_uid"], meta["source_path"], strict=True
    ):
        if isinstance(study, str) and study and isinstance(path, str) and path:
            found.setdefault(study, []).append((int(image_id), path))
    _STUDIES_CACHE.update(key=key, studies=found)
    return found


class _StudyColumns:
    """``{study uid: [(image id, file path)]}.get`` over an archive index's columns."""

    def __init__(self, gallery):  # noqa: ANN001
        self._gallery = gallery

    def get(self, study: str, default=None):  # noqa: ANN001, ANN201
        gallery = self._gallery
        rows = np.flatnonzero(~gallery.columns.not_equal("study_uid", study))
        found = [
            (int(gallery.image_ids[row]), meta.get("source_path"))
            for row, meta in zip(rows, gallery.metadata_records(rows), strict=True)
            if meta.get("source_path")
        ]
        return found or default


def links_maker(access: ViewerAccess):
    """``lookup.viewer_links(user, query study or None, [(image id, study uid)])`` -> {image id:
    link}: the query's study and the result's side by side (the result alone without a query
    study: an uploaded image)."""

    def make(user: str | None, query_study: str | None, results: Iterable[tuple[int, str]]):
        results = [(int(i), s) for i, s in results if isinstance(s, str) and s]
        studies = {s for _, s in results} | ({query_study} if query_study else set())
        grant = access.grant(str(user or "anonymous"), studies)
        links = {}
        for image_id, study in results:
            pair = [query_study, study] if query_study and query_study != study else [study]
            links[image_id] = viewer_url(grant, pair)
        return links

    return make


def viewer_middleware(blocks, lookup, config: UIConfig, sign_in=None) -> Middleware | None:  # noqa: ANN001
    """The gate for ``launch_app`` (None when no OHIF is installed and none was asked for);
    ``sign_in``: the server's ``chexretrieve.ui.access.AccessControl`` (who is signed in, their
    role); None = no sign-in."""
    try:
        dist = find_ohif(config.ohif_dir)
    except FileNotFoundError as exc:
        if config.ohif_dir is not None:
            raise ValueError(str(exc)) from None
        log.warning("%s; results get no 'Open in viewer' link", exc)
        return None
    # grants in the store (every server process on it opens a link any of them made), else here
    access = ViewerAccess(state=getattr(sign_in, "state", None))
    endpoint = None
    if config.dicomweb_url is None:
        endpoint = DicomWebEndpoint(
            lambda: archive_studies(lookup), access, lookup.audit, lookup.read_config
        )
    site = OhifSite(dist, config.dicomweb_url)
    lookup.viewer_links = links_maker(access)
    return Middleware(
        ViewerGate, user_of=lambda request: signed_in_user(blocks, request, sign_in),
        phi_of=lambda user: user_sees_phi(user, sign_in),
        site=site, endpoint=endpoint, access=access,
    )  # fmt: skip
