"""The Gradio app of the case-lookup UI: the page, one module per tab, and launching it.

The tabs are laid out and wired in :mod:`~chexretrieve.ui.lookup_tab`,
:mod:`~chexretrieve.ui.curation_tab` and :mod:`~chexretrieve.ui.evaluation_tab`; all work happens
in the Gradio-free :mod:`chexretrieve.ui.handlers`, :mod:`chexretrieve.ui.curation` and
:mod:`chexretrieve.ui.reports`.
"""

from __future__ import annotations

import gc
import logging
import os
import threading

import gradio as gr

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.ui.access import AccessControl, AccessGuard
from chexretrieve.ui.account_bar import build_account_bar
from chexretrieve.ui.config import UIConfig
from chexretrieve.ui.curation import CurationDesk, DraftDesk
from chexretrieve.ui.curation_tab import build_curation_tab
from chexretrieve.ui.evaluation_tab import build_evaluation_tab
from chexretrieve.ui.handlers import CaseLookup
from chexretrieve.ui.lookup_tab import build_lookup_tab
from chexretrieve.ui.radiology_reports import ReportTexts
from chexretrieve.ui.serve_process import skip_matplotlib_switch
from chexretrieve.ui.theme import CSS, local_theme

log = logging.getLogger("chexretrieve.ui")


def build_app(
    lookup: CaseLookup, curation: CurationDesk | None = None, config: UIConfig | None = None
) -> gr.Blocks:
    """The whole UI over one archive; ``serve_app`` launches it, tests may launch it themselves."""
    config = config or UIConfig()
    curation = curation or DraftDesk(anchors_dir=lookup.anchors_dir)
    purge = (min(config.upload_max_age_s, 60), config.upload_max_age_s)  # (every s, older than s)
    with gr.Blocks(title="chexretrieve · case lookup", fill_width=True, delete_cache=purge) as app:
        gr.HTML(
            "<div class='cx-header'><h1>chexretrieve · case lookup</h1>"
            "<p>Prior chest radiographs that resemble a study with respect to one finding."
            "</p></div>"
        )
        build_account_bar(app, lookup.access)
        with gr.Tabs():
            search = build_lookup_tab(app, lookup, config)
            build_curation_tab(app, curation, lookup, search)
            build_evaluation_tab(app, lookup)
        app.case_lookup_handlers = lookup  # launch_app wires the OHIF viewer's links to it

        gr.HTML(
            "<div class='cx-notice'>Phantom world: unless an archive of real studies was "
            "ingested, images and labels are simulated. Shown per case: view, sex, age, study "
            "date, never names or patient IDs.</div>"
        )
    app.case_lookup_access = lookup.access  # launch_app installs its sign-in and route guard
    return app


def open_case_lookup(config: UIConfig, store=None, encoder=None) -> tuple[CaseLookup, CurationDesk]:
    """Open the store and encoder named by ``config`` (or use the open ``store`` / loaded
    ``encoder`` given) and build the handlers (searches and studies viewed are recorded in the
    audit trail, see chexretrieve.audit). ArchiveEmptyError when the store holds no cases yet."""
    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.search.config import SearchConfig

    search = SearchConfig(feature_cache_dir=config.feature_cache_dir, index_kind=config.index_kind,
                          sharding=config.sharding)  # fmt: skip
    root = open_search_app(
        AppConfig(config.db_url, config.encoder, anchors_dir=config.anchors_dir, search=search,
                  index=config.index, prior=config.prior),
        store=store,
        encoder=encoder,
        background=True,  # what the archive index lacks is built by its background jobs
    )  # fmt: skip
    service, store, audit = root.service, root.store, root.audit
    access = open_access(config, store, audit)
    lookup = CaseLookup(
        service,
        store,
        anchors_dir=config.anchors_dir,
        reports_dir=config.reports_dir,
        thumbnail_px=config.thumbnail_px,
        case_page_size=config.case_page_size,
        thumbnail_dir=config.feature_cache_dir / "thumbnails" if config.feature_cache_dir else None,
        audit=audit,
        report_texts=ReportTexts(
            config.reports_csv,
            store.report_for_image,
            store.reports_for_images,
            store.archive_revision,
        ),
        access=access,
    )
    index = service.index
    published = None
    if index is not None and index.jobs is not None:
        published = index.jobs.publish
        threading.Thread(target=prepare_published, args=(index,), daemon=True,
                         name="chexretrieve-published").start()  # fmt: skip
    curation = DraftDesk(config.anchors_dir, store, root.encoder, lambda: service.gallery,
                         published)  # fmt: skip
    return lookup, curation


def prepare_published(index) -> None:  # noqa: ANN001
    """Queue the build of every finding whose newest anchor-set version is not the one the
    index serves (a version published while no server ran, or by hand)."""
    from chexretrieve.findings import FINDINGS

    anchors = index.anchors
    for finding in FINDINGS:
        try:  # the file's version, not its embedding (StoreAnchorProvider.resolve)
            latest = getattr(anchors, "resolve", anchors.anchor_set)(finding, None).key
        except ValueError:
            continue
        if index.serving_key(finding) not in (None, latest):
            index.jobs.publish(finding)


#: Gradio's queue keeps per-event records for its monitoring summary and, by default, rebuilds
#: that summary (a pandas DataFrame grouped by function) after every event over the last 10,000
#: events: a cost per search that grows with the server's uptime. No page of ours shows it.
QUIET_QUEUE_ENV = {
    "GRADIO_ANALYTICS_ENABLED": "False",  # no usage analytics sent anywhere
    "GRADIO_ANALYTICS_CACHE_FREQUENCY": str(10**9),  # the summary is never rebuilt
    "GRADIO_ANALYTICS_MAX_EVENTS": "100",  # and its records stay few
}


def bounded_queue(app, max_size: int) -> None:  # noqa: ANN001 - a gr.Blocks
    """The app's event queue, at most ``max_size`` waiting (a busy answer beyond), without
    Gradio's per-event monitoring summary (QUIET_QUEUE_ENV; an operator's own values win)."""
    for name, value in QUIET_QUEUE_ENV.items():
        os.environ.setdefault(name, value)
    app.queue(max_size=max_size)


def open_access(config: UIConfig, store, audit=None) -> AccessControl:  # noqa: ANN001
    """The sign-in of ``config`` over the store's accounts (ValueError: none to sign in with, or
    a store the sessions cannot be written to). Sessions, sign-in counts and viewer grants live
    in the store (:func:`chexretrieve.store.access_state.open_access_state`); without sign-in
    they do where the store can be written, else in this process's memory. ``audit``: the audit
    trail of sign-ins (None: the configured one)."""
    from chexretrieve.store import StoreError
    from chexretrieve.store.access_state import open_access_state

    if config.sign_in == "none":
        try:
            state = open_access_state(store.config.url)
        except StoreError as exc:
            log.warning("viewer links are kept in this process's memory only: %s", exc)
            state = None
        return AccessControl(state=state)
    from chexretrieve.accounts.book import AccountBook

    book = AccountBook(store, config.access)
    usable = [r for r in book.list() if not r.disabled]
    if config.sign_in == "accounts":
        usable = [r for r in usable if r.password_hash]
    if not usable:
        raise ValueError(
            f"no enabled account {'with a password ' if config.sign_in == 'accounts' else ''}"
            f"in {store.label}: add one with `chexretrieve users add NAME --role admin` first"
        )
    state = open_access_state(store.config.url)  # StoreError (a ValueError) says why not
    if audit is None:
        from chexretrieve.audit import open_audit_log

        audit = open_audit_log()
    return AccessControl(config.sign_in, book, config.access, state=state, audit=audit)


def sign_in_message(access: AccessConfig) -> str:
    """The login form's text: what a wait after failed attempts looks like (Gradio's form shows
    nothing for a throttled attempt, which the server answers 429)."""
    return (
        f"chexretrieve case lookup: sign in with your own account. After "
        f"{access.user_free_failures} failed attempts the next one waits "
        f"{access.first_delay_s:g} s, and each further failure doubles the wait (up to "
        f"{access.max_delay_s / 60:g} min); while it waits the form does nothing."
    )


def check_sign_in(config: UIConfig) -> None:
    """ValueError before anything is loaded when the sign-in of ``config`` has no account."""
    if config.sign_in == "none":
        return
    from chexretrieve.app.stores import resolve_read_store
    from chexretrieve.store import StoreConfig, open_store

    url = resolve_read_store(config.db_url)  # read-only: serve never migrates or writes the store
    store = open_store(config=StoreConfig(url=url, create_if_missing=False, read_only=True))
    try:
        access = open_access(config, store)
        if access.state is not None:
            access.state.close()
    finally:
        store.close()


def launch_app(app: gr.Blocks, config: UIConfig, block: bool = True, head: str | None = None):
    """Launch with the safe settings: no share link, upload cap, no extra file paths, no
    FastAPI schema, only the page's own routes (AccessGuard), uploads never served back, the
    sign-in of ``config.sign_in``, a bounded event queue (busy answer beyond it).
    ``head``: extra HTML for the page's head (the waiting page's reload script)."""
    from starlette.middleware import Middleware

    from chexretrieve.ui.viewer_links import viewer_middleware
    from chexretrieve.ui.web_guard import UploadsStayPrivate

    access = getattr(app, "case_lookup_access", None) or AccessControl()
    if access.mode != config.sign_in:
        raise ValueError(
            f"the app was built for sign-in {access.mode!r} but the settings say {config.sign_in!r}"
        )
    warning = config.plain_http_warning
    if warning:
        log.warning(warning)
    bounded_queue(app, config.queue_size)
    skip_matplotlib_switch()  # no matplotlib import around every event (this app plots none)
    # outermost first: the route guard and sign-in, then the viewer gate (only signed-in
    # requests reach /viewer and /dicomweb), then the upload privacy guard
    middleware = [
        Middleware(AccessGuard, blocks=app, access=access),
        Middleware(UploadsStayPrivate, blocks=app),
    ]
    lookup = getattr(app, "case_lookup_handlers", None)
    viewer = viewer_middleware(app, lookup, config, access) if lookup is not None else None
    if viewer is not None:  # the OHIF viewer and its DICOMweb endpoint (/viewer, /dicomweb)
        middleware.insert(1, viewer)
    # uvicorn would take X-Forwarded-For from any loopback peer as the client's address (its
    # FORWARDED_ALLOW_IPS default): then a local user could pose as the SSO proxy, or dodge the
    # sign-in throttle. It believes no one; AccessGuard alone decides whom to believe.
    saved_forwarded = os.environ.get("FORWARDED_ALLOW_IPS")
    os.environ["FORWARDED_ALLOW_IPS"] = ""
    try:
        return app.launch(
            app_kwargs={
                "openapi_url": None,  # FastAPI's /openapi.json is served without the login
                "middleware": middleware,
            },
            server_name=config.host,
            server_port=config.port,
            share=False,
            auth=access.gradio_auth(),
            auth_dependency=access.auth_dependency(),
            ssl_certfile=str(config.ssl_certfile) if config.ssl_certfile else None,
            ssl_keyfile=str(config.ssl_keyfile) if config.ssl_keyfile else None,
            # only Gradio's probe of its own local URL at launch: a hospital CA's certificate is
            # often not in the system's trust store (clients verify the certificate as usual)
            ssl_verify=False,
            auth_message=sign_in_message(access.config),
            max_file_size=f"{config.max_upload_mb}mb",
            allowed_paths=None,
            prevent_thread_lock=not block,
            show_error=False,
            # Gradio's own banner would tell to "set share=True"; `serve` prints the address itself
            quiet=True,
            ssr_mode=False,
            mcp_server=False,
            pwa=False,
            enable_monitoring=False,
            footer_links=[],
            theme=local_theme(),
            css=CSS,
            head=head,
        )
    finally:
        if saved_forwarded is None:
            os.environ.pop("FORWARDED_ALLOW_IPS", None)
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = saved_forwarded


def serve_app(config: UIConfig) -> None:
    """Open the archive and serve the UI until interrupted (blocks). On an archive with no cases
    yet, a page saying to run ingest is served until they arrive (chexretrieve.ui.waiting). The
    features and calibrations of each finding's default geometry come from the archive index
    (chexretrieve.index), built at ingest; others are built in the background on first use."""
    from chexretrieve.app import ArchiveEmptyError

    try:
        lookup, curation = open_case_lookup(config)
        app = build_app(lookup, curation, config)
    except ArchiveEmptyError as empty:
        from chexretrieve.ui.waiting import wait_for_cases

        store, encoder = empty.store, empty.encoder

        def build() -> gr.Blocks:
            lookup, curation = open_case_lookup(config, store, encoder)
            return build_app(lookup, curation, config)

        def launch_waiting(page: gr.Blocks, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            # the waiting page signs in as the case lookup will: same accounts, same route guard
            page.case_lookup_access = open_access(config, store)
            return launch_app(page, *args, **kwargs)

        app = wait_for_cases(config, store, encoder, build, launch_waiting)
    # what start-up made (imports, the archive's columns, the page) lives as long as the
    # server: out of the cyclic collector's reach, a full collection no longer walks it
    # (100-150 ms each, at 1M images, in the middle of a search). Not collected first: that
    # took 0.17 s of the start at 300k, for the few cycles start-up leaves behind.
    gc.freeze()
    launch_app(app, config, block=True)
