"""Hosting the prebuilt OHIF Viewer (npm ``@ohif/app``, pinned) under ``/viewer`` of the app.

``make setup`` installs OHIF's ``dist/`` into ``<venv>/ohif/<version>/dist``
(``chexretrieve.viewer_web.install``); nothing is fetched at run time. :class:`OhifSite` serves
that folder with three things of ours in place of OHIF's own:

- ``index.html``: the viewer's page without the service worker, the web manifest and the icons
  (``PUBLIC_URL`` = ``/viewer/``);
- ``app-config.js``: one DICOMweb data source, either the PACS the archive came from
  (``dicomweb_url``) or the app's own endpoint (``/dicomweb``), no study list, no
  "investigational use" dialog, no other data source;
- the webpack public path of OHIF's bundles and the ``url(/...)`` of its stylesheets, built for
  ``/``, are served as ``/viewer/``; the 1 x 2 stage of OHIF's ``@ohif/hpCompare`` hanging
  protocol gets the id ``2x1`` so that the "Open in viewer" link can ask for it; the study
  browser lists the link's studies in the link's order (the query, then the result);
- the viewports' top right corner shows the image's sex, age and view.

Files OHIF ships but a locked-down, offline deployment does not use (service worker, Google and
OIDC scripts, source maps, deployment files) are not served. Every page gets a Content Security
Policy that lets the browser load and connect only to this server (and the PACS when one is
configured), so no CDN asset can be fetched even if a bundle asked for one.
"""

from __future__ import annotations

import json
import mimetypes
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from starlette.responses import FileResponse, Response

#: the pinned OHIF release (npm @ohif/app)
OHIF_VERSION = "3.13.2"
#: where the app is served
PREFIX = "/viewer"
#: files of dist/ never served
REFUSED = frozenset(
    {"sw.js", "init-service-worker.js", "google.js", "oidc-client.min.js", "silent-refresh.html",
     "_headers", "_redirects", "serve.json", "manifest.json", "index.html"}
)  # fmt: skip
_PUBLIC_PATH = '__webpack_require__.p = "/";'
#: OHIF's "compare two studies" protocol names its stages but gives them no id, so a URL cannot
#: ask for its 1 x 2 stage (``stageid=2x1``); the bundle that holds it is served with the id
_COMPARE_MARK = b"id: '@ohif/hpCompare'"
_COMPARE_STAGE = (b"}, {\n    name: '2x1',\n", b"}, {\n    id: '2x1',\n    name: '2x1',\n")
#: OHIF's study browser lists the studies of the link newest first, so a result newer than the
#: query was listed above it although the left viewport is the query: the studies of the link are
#: listed in the link's order (the query first), the others after them, newest first
_STUDY_ORDER_MARK = b"function createStudyBrowserTabs(primaryStudyInstanceUIDs"
_STUDY_ORDER = (
    (
        b"  // Newest first\n  const _byDate = (a, b) => {",
        b"  const _linked = s => { const i = primaryStudyInstanceUIDs.indexOf(s.studyInstanceUid);"
        b" return i < 0 ? primaryStudyInstanceUIDs.length : i; };\n"
        b"  // Newest first\n  const _byDate = (a, b) => {",
    ),
    (
        b".sort((studyA, studyB) => _byDate(studyA.date, studyB.date))",
        b".sort((studyA, studyB) => _linked(studyA) - _linked(studyB) ||"
        b" _byDate(studyA.date, studyB.date))",
    ),
)
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm",
          ".css": "text/css", ".woff2": "font/woff2", ".json": "application/json",
          ".jsonc": "application/json", ".svg": "image/svg+xml"}  # fmt: skip


def default_ohif_dir() -> Path:
    """Where ``make setup`` installs OHIF: ``<the running venv>/ohif/<version>/dist``."""
    return Path(sys.prefix) / "ohif" / OHIF_VERSION / "dist"


def find_ohif(folder: Path | None = None) -> Path:
    """The installed ``dist/`` folder; FileNotFoundError saying how to install it."""
    folder = Path(folder) if folder is not None else default_ohif_dir()
    if not (folder / "index.html").is_file() or not list(folder.glob("app.bundle.*.js")):
        raise FileNotFoundError(
            f"the OHIF Viewer {OHIF_VERSION} is not installed in {folder}: run `make setup` "
            f"(or `python -m chexretrieve.viewer_web.install --into {folder.parent}`)"
        )
    return folder


def app_config_js(dicomweb_root: str | None = None) -> str:
    """OHIF's ``window.config`` for one DICOMweb source: ``dicomweb_root`` (a PACS's DICOMweb
    URL) or, when None, this server's ``/dicomweb`` (an address of the page's own origin)."""
    if dicomweb_root is None:
        root = "window.location.origin + '/dicomweb'"
        name = "chexretrieve archive (read-only)"
    else:
        if urlsplit(dicomweb_root).scheme not in ("http", "https"):
            raise ValueError(f"the DICOMweb URL must be http(s)://..., got {dicomweb_root!r}")
        root = json.dumps(dicomweb_root.rstrip("/"))
        name = "PACS " + urlsplit(dicomweb_root).netloc
    source = f"""{{
      namespace: '@ohif/extension-default.dataSourcesModule.dicomweb',
      sourceName: 'chexretrieve',
      configuration: {{
        friendlyName: {json.dumps(name)},
        name: 'chexretrieve',
        wadoUriRoot: ROOT, qidoRoot: ROOT, wadoRoot: ROOT,
        qidoSupportsIncludeField: false,
        imageRendering: 'wadors',
        thumbnailRendering: 'thumbnail',
        thumbnailRequestStrategy: 'fetch',
        enableStudyLazyLoad: true,
        supportsFuzzyMatching: false,
        supportsWildcard: false,
        staticWado: false,
        singlepart: false,
        omitQuotationForMultipartRequest: true,
        bulkDataURI: {{ enabled: false }},
      }},
    }}"""
    return f"""/* written by chexretrieve (chexretrieve.viewer_web.ohif): one DICOMweb source */
const ROOT = {root};
window.config = {{
  name: 'chexretrieve',
  routerBasename: '{PREFIX}',
  extensions: [],
  modes: [],
  customizationService: {{
    // the corners say what a radiologist reads first: sex and age, the view (DICOM's own
    // PatientSex, PatientAge, ViewPosition of the image shown)
    'viewportOverlay.topRight': {{ $set: [
      {{ id: 'SexAge', inheritsFrom: 'ohif.overlayItem', label: '', title: 'Sex and age',
        condition: ({{ referenceInstance: r }}) => r && (r.PatientSex || r.PatientAge),
        contentF: ({{ referenceInstance: r }}) => [r.PatientSex,
          /^0*(\\d+)Y$/.test(r.PatientAge || '') ? Number(/^0*(\\d+)Y$/.exec(r.PatientAge)[1])
            + ' years' : r.PatientAge].filter(Boolean).join(' ') }},
      {{ id: 'View', inheritsFrom: 'ohif.overlayItem', label: 'View ', title: 'View position',
        condition: ({{ referenceInstance: r }}) => r && r.ViewPosition,
        contentF: ({{ referenceInstance: r }}) => r.ViewPosition }},
    ] }},
  }},
  showStudyList: false,
  investigationalUseDialog: {{ option: 'never' }},
  maxNumberOfWebWorkers: 2,
  showWarningMessageForCrossOrigin: false,
  showCPUFallbackMessage: true,
  showLoadingIndicator: true,
  strictZSpacingForVolumeViewport: true,
  groupEnabledModesFirst: true,
  allowMultiSelectExport: false,
  maxNumRequests: {{ interaction: 100, thumbnail: 5, prefetch: 10 }},
  showErrorDetails: 'always',
  defaultDataSourceName: 'chexretrieve',
  dataSources: [{source}],
  httpErrorHandler: error => {{ console.warn('DICOMweb request failed', error && error.status); }},
}};
"""


def index_html(dist: Path) -> str:
    """Our page for the viewer: OHIF's app bundle and stylesheet, nothing else of its head."""
    original = (dist / "index.html").read_text(encoding="utf-8")
    bundle = re.search(r'src="/(app\.bundle\.[0-9a-f]+\.js)"', original)
    if bundle is None:
        raise FileNotFoundError(f"{dist / 'index.html'} names no app bundle: reinstall OHIF")
    return (
        "<!doctype html><html lang='en'><head><meta charset='UTF-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        "<title>chexretrieve · OHIF Viewer</title>"
        f"<link rel='icon' href='{PREFIX}/assets/favicon.ico'>"
        f"<script>window.PUBLIC_URL='{PREFIX}/';"
        "function browserImportFunction(n){return import(n)}"
        # the onboarding tour would cover the viewports on every first visit: marked as seen
        "try{var t=JSON.parse(localStorage.getItem('shownTours')||'[]');"
        "if(t.indexOf('basicViewerTour')<0){t.push('basicViewerTour');"
        "localStorage.setItem('shownTours',JSON.stringify(t))}}catch(e){}</script>"
        f"<script src='{PREFIX}/app-config.js'></script>"
        f"<script defer src='{PREFIX}/{bundle.group(1)}'></script>"
        f"<link href='{PREFIX}/app.bundle.css' rel='stylesheet'></head>"
        "<body><noscript>The OHIF Viewer needs JavaScript.</noscript>"
        "<div id='react-portal'></div><div id='root'></div></body></html>"
    )


def content_security_policy(dicomweb_root: str | None = None) -> str:
    """Load and connect to this server only (and the PACS, when the source is one)."""
    extra = ""
    if dicomweb_root is not None:
        parts = urlsplit(dicomweb_root)
        extra = f" {parts.scheme}://{parts.netloc}"
    return (
        "default-src 'self'; "
        "script-src 'self' 'unsafe-inline' 'unsafe-eval' 'wasm-unsafe-eval' blob:; "
        "worker-src 'self' blob:; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; font-src 'self' data:; "
        f"connect-src 'self' blob: data:{extra}; frame-ancestors 'self'; base-uri 'self'; "
        "form-action 'self'; object-src 'none'"
    )


class OhifSite:
    """The files of an installed OHIF ``dist/`` under ``/viewer`` (see the module doc)."""

    def __init__(self, dist: Path, dicomweb_root: str | None = None):
        self.dist = find_ohif(dist).resolve()
        self.config_js = app_config_js(dicomweb_root)
        self.index = index_html(self.dist)
        self.headers = {
            "Content-Security-Policy": content_security_policy(dicomweb_root),
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        }
        self._patched: dict[Path, bytes] = {}
        self._lock = threading.Lock()

    def _page(self) -> Response:
        headers = {**self.headers, "Cache-Control": "no-store"}
        return Response(self.index, media_type="text/html", headers=headers)

    def response(self, path: str) -> Response:
        """The answer for ``path`` below ``/viewer`` ('' or '/...')."""
        name = path.lstrip("/")
        if name == "app-config.js":
            return Response(self.config_js, media_type="text/javascript", headers=self.headers)
        if name in ("", "index.html") or "." not in name.rsplit("/", 1)[-1]:
            return self._page()  # OHIF's own routes (viewer?StudyInstanceUIDs=...)
        target = (self.dist / name).resolve()
        base = name.rsplit("/", 1)[-1]
        if (
            not target.is_relative_to(self.dist)
            or not target.is_file()
            or base in REFUSED
            or base.endswith(".map")
        ):
            return Response("not found", status_code=404, media_type="text/plain")
        media = _TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0]
        media = media or "application/octet-stream"
        headers = {**self.headers, "Cache-Control": "private, max-age=3600"}
        if target.suffix in (".js", ".css"):
            return Response(self._rebased(target), media_type=media, headers=headers)
        return FileResponse(target, media_type=media, headers=headers)

    def _rebased(self, target: Path) -> bytes:
        """A script or stylesheet with OHIF's root-relative addresses moved under ``/viewer``
        (the webpack public path of scripts, ``url(/...)`` of stylesheets)."""
        with self._lock:
            if target not in self._patched:
                text = target.read_bytes()
                if target.suffix == ".css":
                    text = text.replace(b"url(/", f"url({PREFIX}/".encode())
                else:
                    text = text.replace(
                        _PUBLIC_PATH.encode(), f'__webpack_require__.p = "{PREFIX}/";'.encode()
                    )
                    if _COMPARE_MARK in text:
                        text = text.replace(*_COMPARE_STAGE)
                    if _STUDY_ORDER_MARK in text:
                        for old, new in _STUDY_ORDER:
                            text = text.replace(old, new)
                self._patched[target] = text
            return self._patched[target]
