"""The Gradio app of the case-lookup UI: the page, one module per tab, and launching it.

The tabs are laid out and wired in :mod:`~chexretrieve.ui.lookup_tab`,
:mod:`~chexretrieve.ui.curation_tab` and :mod:`~chexretrieve.ui.evaluation_tab`; all work happens
in the Gradio-free :mod:`chexretrieve.ui.handlers`, :mod:`chexretrieve.ui.curation` and
:mod:`chexretrieve.ui.reports`.
"""

from __future__ import annotations

import os

import gradio as gr

from chexretrieve.ui.config import UIConfig
from chexretrieve.ui.curation import CurationDesk, DraftDesk
from chexretrieve.ui.curation_tab import build_curation_tab
from chexretrieve.ui.evaluation_tab import build_evaluation_tab
from chexretrieve.ui.handlers import CaseLookup
from chexretrieve.ui.lookup_tab import build_lookup_tab
from chexretrieve.ui.radiology_reports import ReportTexts
from chexretrieve.ui.theme import CSS, local_theme


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
        with gr.Tabs():
            search = build_lookup_tab(app, lookup, config)
            build_curation_tab(app, curation, lookup, search)
            build_evaluation_tab(app, lookup)

        gr.HTML(
            "<div class='cx-notice'>Phantom world: unless an archive of real studies was "
            "ingested, images and labels are simulated. Shown per case: view, sex, age, study "
            "date, never names or patient IDs.</div>"
        )
    return app


def open_case_lookup(config: UIConfig) -> tuple[CaseLookup, CurationDesk]:
    """Open the store and encoder named by ``config`` and build the handlers (searches and
    studies viewed are recorded in the audit trail, see chexretrieve.audit)."""
    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.search.config import SearchConfig

    search = SearchConfig(feature_cache_dir=config.feature_cache_dir, index_kind=config.index_kind)
    root = open_search_app(
        AppConfig(config.db_url, config.encoder, anchors_dir=config.anchors_dir, search=search)
    )
    service, store, audit = root.service, root.store, root.audit
    lookup = CaseLookup(
        service,
        store,
        anchors_dir=config.anchors_dir,
        reports_dir=config.reports_dir,
        thumbnail_px=config.thumbnail_px,
        case_page_size=config.case_page_size,
        thumbnail_dir=config.feature_cache_dir / "thumbnails" if config.feature_cache_dir else None,
        audit=audit,
        report_texts=ReportTexts(config.reports_csv),
    )
    curation = DraftDesk(config.anchors_dir, store, root.encoder, lambda: service.gallery)
    return lookup, curation


def launch_app(app: gr.Blocks, config: UIConfig, block: bool = True):
    """Launch with the safe settings: no share link, upload cap, no extra file paths, no
    FastAPI schema, uploads never served back, a bounded event queue (busy answer beyond it)."""
    from starlette.middleware import Middleware

    from chexretrieve.ui.web_guard import UploadsStayPrivate

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    app.queue(max_size=config.queue_size)
    return app.launch(
        app_kwargs={
            "openapi_url": None,  # FastAPI's /openapi.json is served without the login
            "middleware": [Middleware(UploadsStayPrivate, blocks=app)],
        },
        server_name=config.host,
        server_port=config.port,
        share=False,
        auth=config.auth,
        auth_message="chexretrieve case lookup: sign in",
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
    )


def serve_app(config: UIConfig) -> None:
    """Open the archive and serve the UI until interrupted (blocks); with ``config.warm_up`` the
    geometries are fitted in the background meanwhile (chexretrieve.search.warmup)."""
    lookup, curation = open_case_lookup(config)
    app = build_app(lookup, curation, config)
    if config.warm_up:
        start_ui_warm_up(lookup, config)
    launch_app(app, config, block=True)


def start_ui_warm_up(lookup: CaseLookup, config: UIConfig):
    """The warm-up of what the case lookup's first searches need: every geometry of the finding
    it opens with, the case picker's first page, then the default geometry of the other
    findings. Returns (thread, stop event)."""
    from chexretrieve.findings import FINDINGS
    from chexretrieve.geometry import GEOMETRIES
    from chexretrieve.search.warmup import start_warm_up
    from chexretrieve.ui.lookup_tab import DEFAULT_FINDING

    return start_warm_up(
        lookup.service, DEFAULT_FINDING, [g.name for g in GEOMETRIES], config.top_k,
        other_findings=FINDINGS, extra=lambda: lookup.case_page(finding=DEFAULT_FINDING),
    )  # fmt: skip
