"""Talking to a PACS over DICOMweb: QIDO-RS searches, WADO-RS retrieval, bounded retries.

Built on dicomweb-client with its own retrying switched off: every call goes through
``DicomWebSource._call``, which retries timeouts, dropped connections, 408, 429 and 5xx answers with
exponential back-off (``backoff_s`` doubled per attempt, at most ``max_backoff_s``, at most
``max_retries`` extra attempts) and then gives up with ``PacsUnavailable``. A refused login
(401/403) or a TLS verification failure is never retried: it will not heal by waiting.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import requests

from chexretrieve.pacs.config import DicomWebConfig

#: DICOM UIDs: digits and dots, at most 64 characters (they also name the spool files)
UID_PATTERN = re.compile(r"^[0-9]+(\.[0-9]+)*$")
RETRY_STATUSES = {408, 429, 500, 502, 503, 504}

STUDY_UID, SERIES_UID, SOP_UID, MODALITY = "0020000D", "0020000E", "00080018", "00080060"


class PacsError(ValueError):
    """The DICOMweb ingest cannot go on (bad URL or credentials, TLS failure, unusable answer)."""


class PacsUnavailable(PacsError):
    """The PACS did not answer within the retry budget (down, unreachable or overloaded)."""


class InstanceMissing(Exception):
    """The PACS listed an instance but answers 404/410 when it is retrieved."""


@dataclass(frozen=True)
class SeriesRef:
    series_uid: str
    modality: str | None


def is_uid(value: str) -> bool:
    return isinstance(value, str) and len(value) <= 64 and bool(UID_PATTERN.match(value))


class _PinnedSession(requests.Session):
    """A session whose TLS setting wins over $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE (plain
    requests lets those variables override a session's ``verify``)."""

    pinned_verify: bool | str | None = None

    def merge_environment_settings(self, url, proxies, stream, verify, cert):  # noqa: ANN001, ANN201
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if self.pinned_verify is not None:
            settings["verify"] = self.pinned_verify
        return settings


def make_session(config: DicomWebConfig) -> requests.Session:
    """An HTTP session with TLS verification and the credentials named by the config."""
    session = _PinnedSession()
    if config.ca_bundle is not None:
        if not config.ca_bundle.is_file():
            raise PacsError(f"CA bundle {config.ca_bundle} does not exist; give a PEM file")
        session.verify = session.pinned_verify = str(config.ca_bundle)
    elif not config.verify_tls:
        session.verify = session.pinned_verify = False
    token = os.environ.get(config.token_env, "")
    user = os.environ.get(config.user_env, "")
    password = os.environ.get(config.password_env, "")
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    elif user or password:
        if not (user and password):
            raise PacsError(
                f"basic authentication needs both ${config.user_env} and ${config.password_env}"
            )
        session.auth = (user, password)
    return session


class DicomWebSource:
    """QIDO and WADO calls against one DICOMweb service, each retried within a bound."""

    def __init__(
        self,
        config: DicomWebConfig,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from dicomweb_client.api import DICOMwebClient

        self.config = config
        self.session = session if session is not None else make_session(config)
        self._sleep = sleep
        self.retries = 0  # retried attempts so far (reports read it)
        self._client = DICOMwebClient(
            config.url.rstrip("/"),
            session=self.session,
            timeout=(config.timeout_s, config.timeout_s),
        )
        self._client.set_http_retry_params(retry=False)

    # ------------------------------------------------------------------------------ QIDO
    def studies(self) -> list[str]:
        """StudyInstanceUIDs the PACS lists (from ``since`` on when set), in the PACS's order."""
        filters = {}
        if self.config.since is not None:
            filters["StudyDate"] = f"{self.config.since:%Y%m%d}-"
        found = []
        for item in self._paged("search for studies", self._client.search_for_studies, filters):
            uid = _tag(item, STUDY_UID)
            if uid and uid not in found:
                found.append(uid)
        return found

    def series(self, study_uid: str) -> list[SeriesRef]:
        items = self._paged(
            f"search for series of study {study_uid}",
            self._client.search_for_series,
            {},
            study_instance_uid=study_uid,
        )
        return [
            SeriesRef(_tag(i, SERIES_UID), _tag(i, MODALITY)) for i in items if _tag(i, SERIES_UID)
        ]

    def instances(self, study_uid: str, series_uid: str) -> list[str]:
        items = self._paged(
            f"search for instances of series {series_uid}",
            self._client.search_for_instances,
            {},
            study_instance_uid=study_uid,
            series_instance_uid=series_uid,
        )
        return [uid for uid in (_tag(i, SOP_UID) for i in items) if uid]

    def _paged(self, what: str, search, filters: dict, **keys) -> Iterator[dict]:  # noqa: ANN001
        offset = 0
        while True:
            page = self._call(
                what,
                search,
                limit=self.config.page_size,
                offset=offset,
                search_filters=filters or None,
                **keys,
            )
            yield from page
            if len(page) < self.config.page_size:
                return
            offset += len(page)

    # ------------------------------------------------------------------------------ WADO
    def retrieve(self, study_uid: str, series_uid: str, sop_uid: str) -> bytes:
        """The instance as Part-10 bytes, in the transfer syntax the PACS stores it in."""
        from chexretrieve.dicom.exchange import part10_bytes

        dataset = self._call(
            f"retrieve instance {sop_uid}",
            self._client.retrieve_instance,
            study_uid,
            series_uid,
            sop_uid,
            media_types=(("application/dicom", "*"),),
            missing_is_error=False,
        )
        data, received = part10_bytes(dataset)
        if received != sop_uid:
            raise PacsError(
                f"asked for instance {sop_uid} but the PACS sent {received}; not stored"
            )
        return data

    # ------------------------------------------------------------------------------ retries
    def _call(self, what: str, function, *args, missing_is_error: bool = True, **kwargs) -> Any:  # noqa: ANN001
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            try:
                return function(*args, **kwargs)
            except requests.exceptions.SSLError as exc:
                raise PacsError(
                    f"{what}: TLS verification of {self.config.source_label} failed ({exc}); "
                    "give the PACS's CA with --ca-bundle (or, on a trusted network only, "
                    "--insecure)"
                ) from None
            except requests.exceptions.HTTPError as exc:
                status = exc.response.status_code if exc.response is not None else 0
                if status in (401, 403):
                    raise PacsError(
                        f"{what}: the PACS refused access (HTTP {status}); check "
                        f"${self.config.user_env} / ${self.config.password_env} or "
                        f"${self.config.token_env}"
                    ) from None
                if status in (404, 410) and not missing_is_error:
                    raise InstanceMissing(f"{what}: HTTP {status}") from None
                if status not in RETRY_STATUSES:
                    raise PacsError(f"{what}: the PACS answered HTTP {status}") from None
                problem = f"HTTP {status}"
            except (
                requests.exceptions.ConnectionError,
                requests.exceptions.Timeout,
                requests.exceptions.ChunkedEncodingError,
            ) as exc:
                problem = f"{type(exc).__name__}"
            except ValueError as exc:  # a body cut short cannot be parsed
                if isinstance(exc, PacsError):
                    raise
                problem = f"unreadable answer ({exc})"
            if attempt + 1 < attempts:
                self.retries += 1
                self._sleep(min(self.config.max_backoff_s, self.config.backoff_s * 2**attempt))
        raise PacsUnavailable(
            f"{what}: {problem} after {attempts} attempts; {self.config.source_label} seems down "
            "or unreachable. What was transferred is kept; run the same command again to resume"
        )


def _tag(item: dict, tag: str) -> str | None:
    values = (item.get(tag) or {}).get("Value") or []
    return str(values[0]) if values else None
