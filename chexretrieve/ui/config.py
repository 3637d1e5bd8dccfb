"""Settings of the case-lookup UI (`chexretrieve serve`, `make demo`).

Safe by default: loopback only, no public share link ever, an upload size cap, and sign-in (the
store's accounts or an SSO proxy's header) is required before the app may listen on any other
address; plain HTTP there is warned about (``ssl_certfile``/``ssl_keyfile`` serve HTTPS).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.index.config import IndexConfig
from chexretrieve.search.config import ShardedSearchConfig

#: how users sign in (chexretrieve.ui.access): none (loopback only), accounts, header (SSO proxy)
SIGN_IN_MODES = ("none", "accounts", "header")
#: most `serve --workers` (one per core is the point; beyond that they only share the cores)
MAX_WORKERS = 64


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip()).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class UIConfig:
    # SQLAlchemy URL of the store to search; None = AppConfig.db_url's rule ($CHEXRETRIEVE_DB,
    # else ./chexretrieve.sqlite or the demo store when it exists; never created)
    db_url: str | None = None
    # encoder spec the archive was ingested with (phantom, chexzero:FILE, hf-clip:DIR)
    encoder: str = "phantom"
    # address to bind; anything but loopback needs a sign-in mode other than "none"
    host: str = "127.0.0.1"
    # port to listen on (the first worker's; worker i listens on port + i)
    port: int = 7860
    # serving processes: 1, or N forked after the imports so they share their pages, worker i on
    # port + i behind a reverse proxy with sticky sessions (docs/archive-index.md)
    workers: int = 1
    # folder for persisted gallery features and result thumbnails (thumbnails/ inside);
    # None = the search service's default feature folder, thumbnails kept in memory only
    feature_cache_dir: Path | None = None
    # how users sign in: "none" (no sign-in, loopback only), "accounts" (the store's user
    # accounts, `chexretrieve users`), "header" (an SSO reverse proxy, AccessConfig.trusted_header)
    sign_in: str = "none"
    # password policy, sign-in throttling, session expiry, trusted proxies (AccessConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    # TLS certificate and private key (PEM) to serve HTTPS; None = plain HTTP (warned about on a
    # non-loopback address)
    ssl_certfile: Path | None = None
    # the TLS private key (PEM) of ssl_certfile
    ssl_keyfile: Path | None = None
    # largest accepted upload in MiB (DICOM / PNG / JPEG query images)
    max_upload_mb: int = 50
    # anchor-set folder searched and curated; None = $CHEXRETRIEVE_ANCHORS, else the repo's anchors/
    anchors_dir: Path | None = None
    # private broad sets (id@version or id) joining the posterior prior besides this store's own
    prior: tuple[str, ...] = ()
    # folder whose newest report (a sub-folder with report.md) the Evaluation tab shows
    reports_dir: Path = Path("eval/reports")
    # results shown per ranking (cosine and the anchor geometry each)
    top_k: int = 12
    # archived cases per page of the case picker (every case is reached by paging or searching)
    case_page_size: int = 50
    # longest side in pixels of result thumbnails (the query preview is up to 3x this)
    thumbnail_px: int = 256
    # longest side in pixels of the images in the compare viewer (read from the archived files)
    viewer_px: int = 1024
    # CSV files with a Path and a Report column giving the report text of archived images;
    # empty = a reports.csv in a folder above the archived files (as phantom archives write)
    reports_csv: tuple[Path, ...] = ()
    # actions waiting in the server's event queue beyond which a new one gets a busy answer
    queue_size: int = 32
    # seconds an uploaded file may stay in the server's upload folder before the purge deletes it
    # (the purge runs every min(this, 60) s; uploads are also deleted once embedded)
    upload_max_age_s: int = 3600
    # ranking index for galleries of 500,000 images or more: "none" (exact), "exact", "hnsw", "ivf"
    # (SearchConfig.index_kind; built on the first search of each geometry)
    index_kind: str = "none"
    # where searches rank: this process, or shards of the archive index in Ray actors
    # (SearchConfig.sharding; ShardedSearchConfig.* rows)
    sharding: ShardedSearchConfig = field(default_factory=ShardedSearchConfig)
    # the installed OHIF Viewer's dist/ folder served under /viewer; None = the one `make setup`
    # installs (<venv>/ohif/3.13.2/dist), and no viewer links when it is not installed
    ohif_dir: Path | None = None
    # DICOMweb URL of the PACS the archive came from, read by OHIF directly; None = the app's own
    # read-only /dicomweb endpoint (searched studies only, audited, de-identified unless PHI may
    # be shown)
    dicomweb_url: str | None = None
    # the archive index searches read (chexretrieve.index; built at ingest, shared by every
    # server process; IndexConfig.* rows)
    index: IndexConfig = field(default_factory=IndexConfig)

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be between 1 and 65535, got {self.port}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers must be between 1 and {MAX_WORKERS}, got {self.workers}")
        if self.port + self.workers - 1 >= 65536:
            raise ValueError(f"{self.workers} workers from port {self.port} would pass port 65535")
        if self.sign_in not in SIGN_IN_MODES:
            raise ValueError(
                f"unknown sign-in mode {self.sign_in!r}; choose one of {', '.join(SIGN_IN_MODES)}"
            )
        if not is_loopback(self.host) and self.sign_in == "none":
            raise ValueError(
                f"refusing to serve the archive on {self.host!r} without sign-in: add --accounts "
                "(users from `chexretrieve users add`) or --trusted-header, or bind 127.0.0.1"
            )
        if self.sign_in == "header" and self.access.trusted_header is None:
            raise ValueError(
                "sign-in mode 'header' needs --trusted-header NAME and --trusted-proxy"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("HTTPS needs both --ssl-certfile and --ssl-keyfile")
        for tls in (self.ssl_certfile, self.ssl_keyfile):
            if tls is not None and not Path(tls).is_file():
                raise ValueError(f"TLS file {tls} does not exist or is not a file")
        if not 1 <= self.max_upload_mb <= 2048:
            raise ValueError(f"max_upload_mb must be between 1 and 2048, got {self.max_upload_mb}")
        if not 1 <= self.top_k <= 100:
            raise ValueError(f"top_k must be between 1 and 100, got {self.top_k}")
        if not 1 <= self.case_page_size <= 1000:
            raise ValueError(
                f"case_page_size must be between 1 and 1000, got {self.case_page_size}"
            )
        if not 256 <= self.viewer_px <= 4096:
            raise ValueError(f"viewer_px must be between 256 and 4096, got {self.viewer_px}")
        for path in self.reports_csv:
            if not Path(path).is_file():
                raise ValueError(f"reports CSV {path} does not exist or is not a file")
        if self.index_kind not in ("none", "exact", "hnsw", "ivf"):
            raise ValueError(
                f"unknown index kind {self.index_kind!r}; choose one of: none, exact, hnsw, ivf"
            )
        if self.dicomweb_url is not None and not self.dicomweb_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError(f"--dicomweb must be an http(s):// URL, got {self.dicomweb_url!r}")
        if self.upload_max_age_s < 1:
            raise ValueError(f"upload_max_age_s must be at least 1, got {self.upload_max_age_s}")
        if self.queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {self.queue_size}")
        if not 32 <= self.thumbnail_px <= 1024:
            raise ValueError(f"thumbnail_px must be between 32 and 1024, got {self.thumbnail_px}")

    @property
    def plain_http_warning(self) -> str | None:
        """The warning for plain HTTP on a non-loopback address (None: HTTPS or loopback)."""
        if self.ssl_certfile is not None or is_loopback(self.host):
            return None
        return (
            f"serving over plain HTTP on {self.host}: passwords, session cookies and studies "
            "cross the network unencrypted; pass --ssl-certfile/--ssl-keyfile, or bind 127.0.0.1 "
            "behind a TLS reverse proxy"
        )
