"""The app's own read-only DICOMweb endpoint over the store's files (for the OHIF viewer).

Routes under ``/dicomweb`` (PS3.18; GET only, JSON as ``application/dicom+json``):

- QIDO-RS ``/studies`` (``StudyInstanceUID`` and ``PatientID`` filters, other keys ignored),
  ``/studies/{study}/series``,
  ``/studies/{study}/series/{series}/instances``;
- WADO-RS ``/studies/{study}/metadata``, ``/studies/{study}/series/{series}/metadata``,
  ``.../instances/{sop}/metadata`` and ``.../instances/{sop}/frames/1`` (multipart/related,
  one ``application/octet-stream`` part in Explicit VR Little Endian) and ``thumbnail`` (a
  JPEG under the image's own window; also at series and study level).

A study is answered only when it is in the caller's viewer session (``ViewerAccess``: studies
the user reached through a search); anything else is 404, as if it did not exist. Every
metadata and frame answer is a view of that image in the audit trail (``AuditLog.view``, what
``dicomweb metadata`` / ``dicomweb frame``). Headers are de-identified on the fly
(``chexretrieve.dicom.dicomweb``) unless ``may_see_phi`` says the user may see PHI.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from chexretrieve.dicom.dicomweb import (
    FRAME_TRANSFER_SYNTAX,
    WebInstance,
    thumbnail_jpeg,
    web_instance,
)
from chexretrieve.viewer_web.access import SESSION_COOKIE, ViewerAccess

DICOM_JSON = "application/dicom+json"
_UID = r"[0-9.]{1,64}"
_STUDY = rf"/studies/(?P<study>{_UID})"
_SERIES = rf"{_STUDY}/series/(?P<series>{_UID})"
_INSTANCE = rf"{_SERIES}/instances/(?P<sop>{_UID})"
_ROUTES = [
    ("studies", re.compile(r"^/studies/?$")),
    ("series", re.compile(rf"^{_STUDY}/series/?$")),
    ("instances", re.compile(rf"^{_SERIES}/instances/?$")),
    ("study_metadata", re.compile(rf"^{_STUDY}/metadata/?$")),
    ("series_metadata", re.compile(rf"^{_SERIES}/metadata/?$")),
    ("instance_metadata", re.compile(rf"^{_INSTANCE}/metadata/?$")),
    ("frames", re.compile(rf"^{_INSTANCE}/frames/(?P<frames>[0-9,]{{1,32}})/?$")),
    ("thumbnail", re.compile(rf"^{_INSTANCE}/thumbnail/?$")),
    ("thumbnail", re.compile(rf"^{_SERIES}/thumbnail/?$")),
    ("thumbnail", re.compile(rf"^{_STUDY}/thumbnail/?$")),
]
_STUDY_KEYS = ("00080020", "00080030", "00080050", "00081030", "00100010", "00100020",
               "00100030", "00100040", "00101010", "0020000D", "00200010")  # fmt: skip
_SERIES_KEYS = ("00080060", "0008103E", "0020000D", "0020000E", "00200011", "00080021")
_INSTANCE_KEYS = ("00080016", "00080018", "0020000D", "0020000E", "00200013", "00280010",
                  "00280011", "00280004")  # fmt: skip


@dataclass(frozen=True)
class Caller:
    """Who asks: the signed-in (or local) user, the viewer session and whether PHI is shown."""

    user: str
    session: str | None
    phi: bool


class DicomWebEndpoint:
    """The routes of the module doc over ``studies()``: a callable giving the archive's
    {study uid: [(image id, file path), ...]} as it is now."""

    def __init__(
        self,
        studies: Callable[[], dict[str, list[tuple[int, str]]]],
        access: ViewerAccess,
        audit=None,
        read_config=None,
        cache_entries: int = 16,
    ):
        self.studies = studies
        self.access = access
        self.audit = audit
        self.read_config = read_config
        self._cache: OrderedDict[tuple[str, bool], WebInstance] = OrderedDict()
        self._capacity = cache_entries
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ reading
    def _instance(self, path: str, phi: bool) -> WebInstance:
        key = (path, phi)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        found = web_instance(path, self.read_config, deidentify=not phi)
        with self._lock:
            self._cache[key] = found
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        return found

    def _study(self, caller: Caller, study: str) -> list[tuple[int, WebInstance]]:
        """The readable instances of an allowed study; LookupError (404) otherwise."""
        if not self.access.allowed(caller.session, caller.user, study):
            raise LookupError(study)
        found = []
        for image_id, path in self.studies().get(study, []):
            try:
                found.append((int(image_id), self._instance(str(path), caller.phi)))
            except (OSError, ValueError):  # unreadable here now: left out of the study
                continue
        if not found:
            raise LookupError(study)
        return found

    def _audit(self, caller: Caller, image_id: int, study: str, what: str) -> None:
        if self.audit is not None:
            self.audit.view(caller.user, image_id, study, what=what)

    # ------------------------------------------------------------------ answers
    async def handle(self, request: Request, path: str, caller: Caller) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(status_code=405, headers={"Allow": "GET"})
        for name, pattern in _ROUTES:
            match = pattern.match(path)
            if match:
                answer = getattr(self, "_" + name)
                try:  # file reads and decoding off the server's event loop
                    return await run_in_threadpool(answer, request, caller, **match.groupdict())
                except LookupError:
                    return Response("not found", status_code=404, media_type="text/plain")
                except ValueError as exc:  # the audit trail cannot be written: nothing is sent
                    return Response(str(exc), status_code=503, media_type="text/plain")
        return Response("not found", status_code=404, media_type="text/plain")

    def _studies(self, request: Request, caller: Caller) -> Response:
        wanted = set()
        for value in request.query_params.getlist("StudyInstanceUID"):
            wanted |= {v.strip() for v in value.replace("\\", ",").split(",") if v.strip()}
        allowed = self.access.studies_of(caller.session, caller.user)
        patient = request.query_params.get("PatientID") or request.query_params.get("00100020")
        answers = []
        for study in sorted(allowed & wanted if wanted else allowed):
            try:
                instances = self._study(caller, study)
            except LookupError:
                continue
            first = instances[0][1].metadata
            if patient and _value(first, "00100020") != patient:
                continue  # OHIF asks for a patient's other studies (priors) by PatientID
            row = {k: first[k] for k in _STUDY_KEYS if k in first}
            modalities = sorted({_value(i.metadata, "00080060") for _, i in instances} - {None})
            row["00080061"] = {"vr": "CS", "Value": modalities}
            row["00201206"] = {"vr": "IS", "Value": [len({i.series_uid for _, i in instances})]}
            row["00201208"] = {"vr": "IS", "Value": [len(instances)]}
            answers.append(row)
        return _json(answers)

    def _series(self, request: Request, caller: Caller, study: str) -> Response:
        by_series: dict[str, list[WebInstance]] = {}
        for _, instance in self._study(caller, study):
            by_series.setdefault(instance.series_uid, []).append(instance)
        answers = []
        for _, instances in sorted(by_series.items()):
            first = instances[0].metadata
            row = {k: first[k] for k in _SERIES_KEYS if k in first}
            row["00201209"] = {"vr": "IS", "Value": [len(instances)]}
            answers.append(row)
        return _json(answers)

    def _instances(self, request: Request, caller: Caller, study: str, series: str) -> Response:
        rows = [
            {k: i.metadata[k] for k in _INSTANCE_KEYS if k in i.metadata}
            for _, i in self._study(caller, study)
            if i.series_uid == series
        ]
        if not rows:
            raise LookupError(series)
        return _json(rows)

    def _metadata(self, caller: Caller, study: str, keep) -> Response:
        chosen = [(image_id, i) for image_id, i in self._study(caller, study) if keep(i)]
        if not chosen:
            raise LookupError(study)
        for image_id, _ in chosen:
            self._audit(caller, image_id, study, "dicomweb metadata")
        return _json([i.metadata for _, i in chosen])

    def _study_metadata(self, request, caller, study):
        return self._metadata(caller, study, lambda i: True)

    def _series_metadata(self, request, caller, study, series):
        return self._metadata(caller, study, lambda i: i.series_uid == series)

    def _instance_metadata(self, request, caller, study, series, sop):
        return self._metadata(caller, study, lambda i: (i.series_uid, i.sop_uid) == (series, sop))

    def _frames(self, request, caller, study, series, sop, frames):
        numbers = {int(n) for n in frames.split(",") if n}
        chosen = [
            (image_id, i)
            for image_id, i in self._study(caller, study)
            if (i.series_uid, i.sop_uid) == (series, sop)
        ]
        if not chosen or numbers != {1}:  # every archived radiograph is one frame
            raise LookupError(sop)
        image_id, instance = chosen[0]
        self._audit(caller, image_id, study, "dicomweb frame")
        boundary = secrets.token_hex(16)
        part = f"application/octet-stream; transfer-syntax={FRAME_TRANSFER_SYNTAX}"
        body = (
            f"--{boundary}\r\nContent-Type: {part}\r\n\r\n".encode()
            + instance.frame
            + f"\r\n--{boundary}--\r\n".encode()
        )
        media = f'multipart/related; type="application/octet-stream"; boundary={boundary}'
        return Response(body, media_type=media, headers={"Cache-Control": "no-store"})

    def _thumbnail(self, request, caller, study, series=None, sop=None):
        """The first matching image under its own window, as a JPEG of at most ``viewport``
        (``W,H``; 128 by default, 512 at most) on the longer side."""
        try:
            side = max(int(v) for v in request.query_params.get("viewport", "128").split(","))
        except ValueError:
            side = 128
        side = min(max(side, 16), 512)
        self._study(caller, study)  # LookupError unless this session may read the study
        for image_id, path in self.studies().get(study, []):
            instance = self._instance(str(path), caller.phi)
            if series not in (None, instance.series_uid) or sop not in (None, instance.sop_uid):
                continue
            self._audit(caller, image_id, study, "dicomweb thumbnail")
            return Response(
                thumbnail_jpeg(path, side, self.read_config), media_type="image/jpeg",
                headers={"Cache-Control": "no-store"},
            )  # fmt: skip
        raise LookupError(study)


def _value(metadata: dict, tag: str):
    values = metadata.get(tag, {}).get("Value") or [None]
    return values[0]


def _json(rows) -> Response:
    return JSONResponse(rows, media_type=DICOM_JSON, headers={"Cache-Control": "no-store"})


def viewer_session(request: Request) -> str | None:
    """The viewer session id the browser sends (the cookie set by ``/viewer/open``)."""
    return request.cookies.get(SESSION_COOKIE)
