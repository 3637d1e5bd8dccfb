"""`serve` on an archive that holds no cases yet: a page that says to run ingest, then the UI.

A fresh database (the container stack before its first ``ingest``) holds no embeddings of the
encoder. Instead of exiting, ``serve`` serves a small page on the same address and login that
names the store and the command to run, and polls the store; once the encoder's first embeddings
are stored it builds the case-lookup app over them, stops the page and serves the app in its place.
An open page asks the server every few seconds and reloads itself once the app is served, so a
browser tab shows the case lookup without a click.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from collections.abc import Callable

import gradio as gr

from chexretrieve.ui.config import UIConfig

#: seconds between two reloads of the waiting page in the browser
PAGE_RELOAD_S = 5


def waiting_message(store_label: str, encoder_id: str, encoder_spec: str) -> str:
    """The page's text (plain words, also printed on the console)."""
    return (
        f"The archive {store_label} holds no cases of encoder {encoder_id} yet. "
        f"Run ingest to add studies: `chexretrieve ingest FOLDER --db URL --encoder "
        f"{encoder_spec}` for files, `chexretrieve ingest --dicomweb URL --db URL` for a PACS, "
        "or `docker compose run --rm ingest` in the container stack (docker/compose.yaml). "
        "The case lookup opens here by itself once the first cases are stored."
    )


def build_waiting_page(message: str) -> gr.Blocks:
    with gr.Blocks(title="chexretrieve · waiting for cases", fill_width=True) as page:
        gr.HTML(
            "<div class='cx-header'><h1>chexretrieve · case lookup</h1>"
            "<p>Prior chest radiographs that resemble a study with respect to one finding.</p>"
            "</div>"
        )
        gr.HTML(f"<div class='cx-notice' id='cx-waiting'>{html.escape(message)}</div>")
    return page


#: the script in the waiting page's head: while the waiting notice is on screen (not on the
#: login form, where a reload would clear what the user typed), ask the server for its app every
#: few seconds and reload once it serves another one (its configuration lacks the notice) or asks
#: for a login again (the new app's session); a server down for the swap is asked again later.
RELOAD_SCRIPT = """<script>
setInterval(function () {
  if (!document.getElementById("cx-waiting")) { return; }
  fetch(new URL("config", location.href), {credentials: "same-origin", cache: "no-store"})
    .then(function (answer) {
      if (!answer.ok) { location.reload(); return; }
      return answer.text().then(function (text) {
        if (text.indexOf("cx-waiting") < 0) { location.reload(); }
      });
    })
    .catch(function () {});
}, MILLISECONDS);
</script>"""


def _reload_script(seconds: int) -> str:
    return RELOAD_SCRIPT.replace("MILLISECONDS", str(int(seconds) * 1000))


def wait_for_cases(
    config: UIConfig,
    store,  # noqa: ANN001 - chexretrieve.store.Store
    encoder,  # noqa: ANN001 - chexretrieve.encoders.Encoder
    build: Callable[[], gr.Blocks],
    launch: Callable[..., object],
    *,
    poll_s: float = 2.0,
    stop: threading.Event | None = None,
) -> gr.Blocks | None:
    """Serve the waiting page until ``store`` holds embeddings of ``encoder``; then call
    ``build()`` (the case-lookup app), stop the page and return the built app for the caller to
    launch on the freed port. None when ``stop`` is set first (tests).

    ``launch(page, config, block=False, head=...)`` serves the page
    (chexretrieve.ui.app.launch_app, passed in to keep the modules free of an import cycle)."""
    from chexretrieve.app import archive_has_embeddings

    message = waiting_message(store.label, encoder.encoder_id, config.encoder)
    print(f"waiting for cases: {message}", file=sys.stderr, flush=True)
    page = build_waiting_page(message)
    launch(page, config, block=False, head=_reload_script(PAGE_RELOAD_S))

    def has_cases() -> bool:
        try:
            return archive_has_embeddings(store, encoder.encoder_id)
        except Exception as exc:  # noqa: BLE001 - a database restart must not end the page
            print(f"waiting for cases: the store did not answer ({exc}); retrying",
                  file=sys.stderr, flush=True)  # fmt: skip
            return False

    try:
        while not has_cases():
            if stop is not None and stop.wait(poll_s):
                return None
            if stop is None:
                time.sleep(poll_s)
        app = build()  # before the page stops: the address is unserved only for the swap
    finally:
        page.close()
    print("cases stored: serving the case lookup", file=sys.stderr, flush=True)
    return app


__all__ = ["PAGE_RELOAD_S", "build_waiting_page", "wait_for_cases", "waiting_message"]
