"""The case-lookup web UI (Gradio), the project's only Gradio importer.

``serve_app(UIConfig(...))`` opens the archive and serves until interrupted; ``build_app`` builds
the ``gr.Blocks`` over handlers (tests launch it themselves). The work is done by plain-Python
handlers (``handlers.py``, ``curation.py``, ``reports.py``) that do not import Gradio.
"""

from __future__ import annotations


def serve_app(config) -> None:
    """Serve the UI described by a :class:`chexretrieve.ui.config.UIConfig` (blocks)."""
    from chexretrieve.ui.app import serve_app as _serve

    _serve(config)


def build_app(lookup, curation=None, config=None):
    """The ``gr.Blocks`` app over a CaseLookup (and CurationDesk); see ``chexretrieve.ui.app``."""
    from chexretrieve.ui.app import build_app as _build

    return _build(lookup, curation, config)


__all__ = ["build_app", "serve_app"]
