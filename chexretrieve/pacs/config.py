"""Settings of the DICOMweb (PACS) ingest: where, what, how securely, how patiently."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


@dataclass(frozen=True)
class DicomWebConfig:
    # DICOMweb root URL (QIDO-RS and WADO-RS below it), e.g. https://pacs.example.org/dicom-web
    url: str
    # StudyInstanceUIDs to pull (--study); empty = every study the PACS lists
    studies: tuple[str, ...] = ()
    # only studies whose StudyDate is on or after this day (--since); None = any date
    since: dt.date | None = None
    # folder the retrieved instances are kept in (--spool); the UI shows images from there
    spool_dir: Path = Path("dicomweb-spool")
    # verify the server's TLS certificate (--insecure turns this off)
    verify_tls: bool = True
    # PEM bundle of certificate authorities to verify against (--ca-bundle); None = the system's
    ca_bundle: Path | None = None
    # environment variable holding the basic-auth user name (used with password_env)
    user_env: str = "CHEXRETRIEVE_DICOMWEB_USER"
    # environment variable holding the basic-auth password
    password_env: str = "CHEXRETRIEVE_DICOMWEB_PASSWORD"
    # environment variable holding a bearer token (takes precedence over basic auth)
    token_env: str = "CHEXRETRIEVE_DICOMWEB_TOKEN"
    # seconds to wait for a connection and for each answer
    timeout_s: float = 30.0
    # extra attempts after a timeout, a dropped connection, 408, 429 or a 5xx answer
    max_retries: int = 4
    # first pause before a retry, doubled after each failed attempt
    backoff_s: float = 0.5
    # longest pause between two attempts
    max_backoff_s: float = 8.0
    # QIDO results asked for per request (limit/offset paging)
    page_size: int = 200
    # instances transferred before they are decoded, embedded and stored together (one run)
    flush_instances: int = 64
    # series modalities transferred (others are never downloaded); None = every series
    modalities: tuple[str, ...] | None = ("CR", "DX")

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"DICOMweb URL {self.url!r} is not an http(s) URL; give the service root, e.g. "
                "https://pacs.example.org/dicom-web"
            )
        if parts.username or parts.password:
            raise ValueError(
                "the DICOMweb URL contains credentials; remove them and set "
                f"${self.user_env} / ${self.password_env} (or ${self.token_env}) instead"
            )
        if self.timeout_s <= 0 or self.backoff_s < 0 or self.max_backoff_s < self.backoff_s:
            raise ValueError(
                "timeout must be positive and 0 <= backoff_s <= max_backoff_s, got "
                f"{self.timeout_s}, {self.backoff_s}, {self.max_backoff_s}"
            )
        if self.max_retries < 0 or self.page_size < 1 or self.flush_instances < 1:
            raise ValueError(
                "max_retries must be >= 0, page_size and flush_instances >= 1, got "
                f"{self.max_retries}, {self.page_size}, {self.flush_instances}"
            )

    @property
    def source_label(self) -> str:
        """The URL as recorded in the store: scheme, host, port and path, nothing else."""
        parts = urlsplit(self.url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}{parts.path.rstrip('/')}"
