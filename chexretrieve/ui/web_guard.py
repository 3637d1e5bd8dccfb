"""An ASGI guard in front of the Gradio server: uploads never served back, no developer routes.

Gradio serves every file of its upload folder through ``/gradio_api/file=PATH`` to any signed-in
session that knows the path, so one user could fetch another's uploaded study. The case lookup
never needs an upload back (it renders pixels in memory), so requests for a path Gradio recorded as
uploaded are refused with an empty 403, whoever asks. So is Gradio's hot-reload event stream
(``/gradio_api/dev/reload``), which only a developer's reload mode uses.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

_FILE_ROUTES = ("/file=", "/file/")
_DEVELOPER_ROUTES = ("/dev/reload",)


class UploadsStayPrivate:
    """ASGI middleware; ``blocks`` is the Gradio app whose ``upload_file_set`` lists uploads."""

    def __init__(self, app, blocks) -> None:  # noqa: ANN001
        self.app = app
        self.blocks = blocks

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope.get("type") == "http" and self._refused(scope.get("path", "")):
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [(b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)

    def _refused(self, path: str) -> bool:
        path = unquote(path)
        if path.rstrip("/").endswith(_DEVELOPER_ROUTES):
            return True
        for marker in _FILE_ROUTES:
            if marker in path:
                target = path.split(marker, 1)[1]
                uploads = list(getattr(self.blocks, "upload_file_set", ()) or ())
                try:
                    wanted = Path(target).resolve()
                    return any(Path(p).resolve() == wanted for p in uploads)
                except (OSError, ValueError):
                    return True
        return False
