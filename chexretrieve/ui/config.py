"""Settings of the case-lookup UI (`chexretrieve serve`, `make demo`).

Safe by default: loopback only, no public share link ever, an upload size cap, and a login is
required before the app may listen on any other address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

#: environment variable the CLI reads the login password from (never a command-line option)
PASSWORD_ENV = "CHEXRETRIEVE_UI_PASSWORD"


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
    # address to bind; anything but loopback needs `auth`
    host: str = "127.0.0.1"
    # port to listen on
    port: int = 7860
    # folder for persisted gallery features and result thumbnails (thumbnails/ inside);
    # None = the search service's default feature folder, thumbnails kept in memory only
    feature_cache_dir: Path | None = None
    # (user, password) required to open the app; None = no login (loopback only)
    auth: tuple[str, str] | None = None
    # largest accepted upload in MiB (DICOM / PNG / JPEG query images)
    max_upload_mb: int = 50
    # anchor-set folder searched and curated; None = $CHEXRETRIEVE_ANCHORS, else the repo's anchors/
    anchors_dir: Path | None = None
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
    # fit and cache every geometry of the opening finding (then the default geometry of the
    # others) in a background thread at start, so no first search waits for a fit
    warm_up: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be between 1 and 65535, got {self.port}")
        if self.auth is not None:
            user, password = self.auth
            if not user or not password:
                raise ValueError("a login needs a non-empty user name and password")
        if not is_loopback(self.host) and self.auth is None:
            raise ValueError(
                f"refusing to serve the archive on {self.host!r} without a login: add "
                f"--login USER (password from ${PASSWORD_ENV}) or bind 127.0.0.1"
            )
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
        if self.upload_max_age_s < 1:
            raise ValueError(f"upload_max_age_s must be at least 1, got {self.upload_max_age_s}")
        if self.queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {self.queue_size}")
        if not 32 <= self.thumbnail_px <= 1024:
            raise ValueError(f"thumbnail_px must be between 32 and 1024, got {self.thumbnail_px}")
