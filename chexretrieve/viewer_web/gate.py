"""The ASGI gate in front of the app that serves the OHIF viewer and the DICOMweb endpoint.

``ViewerGate(app, user_of=..., site=..., endpoint=..., access=...)`` answers ``/viewer/...`` and
``/dicomweb/...`` itself and passes every other request to ``app`` (the Gradio server):

- ``user_of(request)`` says who is signed in (the app's own login: the same session cookie as
  the case lookup) or None; nobody signed in gets 401 for both prefixes, nothing else;
- ``/viewer/open?grant=TOKEN&studies=UID[,UID]`` checks the grant of a search for this user
  (``ViewerAccess.open``), sets the viewer-session cookie and sends the browser to OHIF with
  those studies side by side (OHIF's ``@ohif/hpCompare`` hanging protocol: two viewports);
- ``/viewer/...``: the OHIF files (``OhifSite``), ``/dicomweb/...``: the read-only endpoint
  (``DicomWebEndpoint``; 404 when the viewer reads a PACS instead).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from chexretrieve.viewer_web.access import GRANT_TTL_S, SESSION_COOKIE, ViewerAccess
from chexretrieve.viewer_web.dicomweb import Caller, DicomWebEndpoint, viewer_session
from chexretrieve.viewer_web.ohif import PREFIX, OhifSite

DICOMWEB_PREFIX = "/dicomweb"
#: OHIF's hanging protocol for two studies side by side (query left, result right)
COMPARE_PROTOCOL = "@ohif/hpCompare"
COMPARE_STAGE = "2x1"


def viewer_url(grant: str, study_uids: list[str]) -> str:
    """The "Open in viewer" link of a results page (relative to the app's root)."""
    return f"{PREFIX}/open?" + urlencode({"grant": grant, "studies": ",".join(study_uids)})


class ViewerGate:
    """ASGI middleware (see the module doc)."""

    def __init__(self, app, *, user_of: Callable[[Request], str | None],
                 phi_of: Callable[[str], bool], site: OhifSite | None,
                 endpoint: DicomWebEndpoint | None, access: ViewerAccess) -> None:  # fmt: skip
        self.app = app
        self.user_of = user_of
        self.phi_of = phi_of
        self.site = site
        self.endpoint = endpoint
        self.access = access

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        mine = [p for p in (PREFIX, DICOMWEB_PREFIX) if path == p or path.startswith(p + "/")]
        if not mine:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        response = await self._answer(request, mine[0], path[len(mine[0]) :])
        await response(scope, receive, send)

    async def _answer(self, request: Request, prefix: str, rest: str) -> Response:
        user = self.user_of(request)
        if user is None:
            return Response(
                "<p>Sign in to chexretrieve first: <a href='/'>open the case lookup</a>.</p>",
                status_code=401, media_type="text/html",
            )  # fmt: skip
        if prefix == DICOMWEB_PREFIX:
            if self.endpoint is None:
                return Response("not found", status_code=404, media_type="text/plain")
            caller = Caller(user, viewer_session(request), bool(self.phi_of(user)))
            return await self.endpoint.handle(request, rest, caller)
        if rest.rstrip("/") == "/open":
            return self._open(request, user)
        if self.site is None:
            return Response(
                "The OHIF viewer is not installed on this server (run `make setup`).",
                status_code=404, media_type="text/plain",
            )  # fmt: skip
        return await run_in_threadpool(self.site.response, rest)  # reads files off the loop

    def _open(self, request: Request, user: str) -> Response:
        params = request.query_params
        studies = [s for s in (params.get("studies") or "").split(",") if s]
        try:
            session = self.access.open(params.get("grant"), user, studies, viewer_session(request))
        except PermissionError as exc:
            return Response(str(exc), status_code=403, media_type="text/plain")
        query = {"StudyInstanceUIDs": ",".join(studies)}
        if len(studies) > 1:  # two viewports side by side (the protocol's 1 x 2 stage)
            query["hangingprotocolId"] = COMPARE_PROTOCOL
            query["stageid"] = COMPARE_STAGE
        target = f"{PREFIX}/viewer?" + urlencode(query, safe=",@/")
        answer = RedirectResponse(target, status_code=303)
        answer.set_cookie(
            SESSION_COOKIE, session, max_age=GRANT_TTL_S, path="/", httponly=True,
            samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        return answer
