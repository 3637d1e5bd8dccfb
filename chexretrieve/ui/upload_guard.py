"""Refusing an upload before it is sent, with the refusal in the page's message area.

Gradio checks an upload's size in the browser and answers an oversized file with a toast that
vanishes and an "Error" badge over the drop zone. ``upload_guard_js`` checks first (capture phase,
so Gradio never sees the file) and asks the server, through the message component's ``pick``
event, for the message (``refused_upload_message``); the drop zone stays as it was. The type of a
file is not guessed from its name (DICOM files often have none): the server reads its content and
refuses what is not a DICOM, PNG or JPEG image (``upload_errors.upload_message``).
"""

from __future__ import annotations

from chexretrieve.ui.upload_errors import upload_message

_MIB = 1024 * 1024


def refused_upload_message(event: dict | None, max_upload_mb: int) -> str:
    """The text for a file the browser refused (``{"name": ..., "size": bytes}``)."""
    event = event or {}
    name = str(event.get("name") or "the file")
    try:
        size = float(event.get("size") or 0)
    except (TypeError, ValueError):
        size = 0.0
    detail = f"{size / _MIB:.1f} MiB; uploads are at most {max_upload_mb} MiB"
    return upload_message(name, "too-large", detail)


def upload_guard_js(upload_id: str, max_upload_mb: int) -> str:
    """JavaScript for ``gr.HTML(js_on_load=...)`` of the message area: a file dropped on or
    chosen in ``#upload_id`` that is larger than the cap is stopped and reported with
    ``trigger('pick', {name, size})``."""
    limit = int(max_upload_mb) * _MIB
    return r"""
if (!window.cxUploadGuard) {
  window.cxUploadGuard = true;
  const LIMIT = @LIMIT@;
  const zone = '#@ZONE@';
  const refuse = (event, files) => {
    const big = Array.from(files || []).find((f) => f.size > LIMIT);
    if (!big) return;
    event.stopImmediatePropagation();
    event.preventDefault();
    if (event.target && event.target.value !== undefined) event.target.value = '';
    trigger('pick', {name: big.name, size: big.size});
  };
  document.addEventListener('change', (event) => {
    if (event.target.matches && event.target.matches(zone + ' input[type=file]')) {
      refuse(event, event.target.files);
    }
  }, true);
  document.addEventListener('drop', (event) => {
    if (event.target.closest && event.target.closest(zone)) {
      refuse(event, event.dataTransfer && event.dataTransfer.files);
    }
  }, true);
}
""".replace("@LIMIT@", str(limit)).replace("@ZONE@", upload_id)
