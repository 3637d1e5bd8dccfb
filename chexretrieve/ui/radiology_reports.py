"""Report text of archived images, for the case lookup (no Gradio, nothing written).

First the report the store keeps for the image's study (``chexretrieve ingest`` stores MIMIC's
report files and ``--reports`` CSVs; ``Store.report_for_image``). Else reports come from CSV files
with a ``Path`` column and a report column (``Report``, ``report``, ``Report Text`` or
``report_text``), as phantom archives write ``reports.csv`` and real archives can add a reports
column to their labels CSV:

- the files named in ``UIConfig.reports_csv`` (any number);
- else a ``reports.csv`` in a folder above the archived file (the phantom layout), found once per
  folder.

A row matches an image when its Path equals a trailing part of the image's source path (whole
components, '/' separators), the longest such row winning; the same rule ingest uses for labels.
"""

from __future__ import annotations

import csv
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path, PurePath

#: column names read as the report text (first found, compared case-insensitively)
REPORT_COLUMNS = ("report", "report text", "report_text")
#: file looked for in the folders above an archived image when no reports CSV is configured
REPORTS_FILE = "reports.csv"
#: how many folders above an image are searched for REPORTS_FILE
SEARCH_DEPTH = 6
#: longest report text kept (a longer one is cut with an ellipsis)
MAX_REPORT_CHARS = 4000
#: stored reports kept in memory, the most recently asked for (at most 4,000 characters each)
KEPT_REPORTS = 4096


def read_reports_csv(path: Path) -> dict[str, str]:
    """Path (with '/' separators, no leading './') -> report text of one CSV; ValueError when the
    file has no Path or report column."""
    csv.field_size_limit(1 << 24)
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        reader = csv.DictReader(handle)
        columns = {name.strip().lower(): name for name in reader.fieldnames or ()}
        path_column = columns.get("path")
        text_column = next((columns[c] for c in REPORT_COLUMNS if c in columns), None)
        if path_column is None or text_column is None:
            raise ValueError(
                f"{path.name} needs a 'Path' column and a report column "
                f"({', '.join(REPORT_COLUMNS)}); it has {', '.join(columns) or 'none'}"
            )
        found: dict[str, str] = {}
        for row in reader:
            key = _normalise(row.get(path_column) or "")
            text = " ".join((row.get(text_column) or "").split())
            if key and text:
                found[key] = _shortened(text)
        return found


def _shortened(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REPORT_CHARS else text[:MAX_REPORT_CHARS] + "…"


def _normalise(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


class ReportTexts:
    """Report text by archived source path (see the module doc); files are read once, lazily."""

    def __init__(
        self,
        csv_files: Sequence[Path] = (),
        stored: Callable[[int], str | None] | None = None,
        stored_many: Callable[[Sequence[int]], dict[int, str | None]] | None = None,
        revision: Callable[[], int] | None = None,
    ):
        self.csv_files = tuple(Path(p) for p in csv_files)
        self.stored = stored  # image id -> the store's report of its study (or None)
        self.stored_many = stored_many  # image ids -> {id: that report}, in one read
        # the archive's generation (Store.archive_revision; storing reports moves it): the
        # stored reports kept in memory are forgotten when it moves, so a report imported while
        # the server runs is shown at the next look, not after a restart; None = never forgotten
        self.revision = revision
        self._by_image: OrderedDict[int, str | None] = OrderedDict()  # at most KEPT_REPORTS
        self._kept_at: int | None = None  # the revision the kept reports were read at
        self._lock = threading.Lock()
        self._configured: dict[str, str] | None = None
        # folder -> ((mtime, size) of its reports file or None, the file's table or None)
        self._by_folder: dict[Path, tuple] = {}
        self._by_source: dict[str, str] = {}  # reports already found, by source path

    def _configured_reports(self) -> dict[str, str]:
        if self._configured is None:
            merged: dict[str, str] = {}
            for path in self.csv_files:
                merged.update(read_reports_csv(path))
            self._configured = merged
        return self._configured

    def _folder_reports(self, folder: Path) -> dict[str, str] | None:
        """The folder's reports file, read again when it appears or changes (an archive still
        being written, as `make demo`'s, grows its reports.csv while the server runs)."""
        candidate = folder / REPORTS_FILE
        try:
            info = candidate.stat()
            version = (info.st_mtime_ns, info.st_size) if candidate.is_file() else None
        except OSError:
            version = None
        cached = self._by_folder.get(folder)
        if cached is None or cached[0] != version:
            try:
                table = read_reports_csv(candidate) if version is not None else None
            except (OSError, ValueError):
                table = None  # not a reports file of this layout: ignored
            self._by_folder[folder] = cached = (version, table)
        return cached[1]

    def prefetch(self, image_ids) -> None:
        """Read the stored reports of the images not yet asked for, in one read of the store
        (``report_for`` then answers them from memory)."""
        if self.stored is None:
            return
        self._forget_if_moved()  # also for ``report_for(prefetched=True)`` when it reads one by one
        if self.stored_many is None:
            return
        seen = self._kept_at
        missing = [int(i) for i in image_ids if int(i) not in self._by_image]
        if missing:
            for key, text in self.stored_many(missing).items():
                self._keep(key, _shortened(text) if text else None, seen)

    def _keep(self, image_id: int, text: str | None, seen: int | None) -> None:
        """Remember ``text`` as the report of ``image_id``, forgetting the least recently asked
        for beyond KEPT_REPORTS (a server over a million images would otherwise keep them all).
        ``seen``: the revision checked before the read; when another request has seen the
        revision move since, the text may be older than the store's and is not kept."""
        with self._lock:
            if seen != self._kept_at:
                return
            self._by_image[image_id] = text
            self._by_image.move_to_end(image_id)
            while len(self._by_image) > KEPT_REPORTS:
                self._by_image.popitem(last=False)

    def _forget_if_moved(self) -> None:
        """Forget the kept stored reports when the archive's revision moved since they were
        read (one small read of the store)."""
        if self.revision is None:
            return
        now = int(self.revision())
        with self._lock:
            if now != self._kept_at:
                self._by_image.clear()
                self._kept_at = now

    def report_for(
        self, source_path: str | None, image_id: int | None = None, prefetched: bool = False
    ) -> str | None:
        """The report of image ``image_id`` (the store's), else of the image read from
        ``source_path`` (the CSVs'), or None when none is known. ``prefetched``: the caller has
        just called ``prefetch`` for this image, which checked the archive's revision."""
        if self.stored is not None and image_id is not None:
            if not prefetched:
                self._forget_if_moved()
            seen = self._kept_at
            key = int(image_id)
            with self._lock:
                known = key in self._by_image
                text = self._by_image.get(key)
                if known:
                    self._by_image.move_to_end(key)
            if not known:
                stored = self.stored(key)
                text = _shortened(stored) if stored else None
                self._keep(key, text, seen)
            if text is not None:
                return text
        if not isinstance(source_path, str) or not source_path:
            return None
        with self._lock:
            if source_path in self._by_source:
                return self._by_source[source_path]
            found = self._find(source_path)
            if found is not None:  # "none yet" is asked again: a reports file may appear
                self._by_source[source_path] = found
            return found

    def _find(self, source_path: str) -> str | None:
        """The report of one source path (the caller holds the lock)."""
        parts = _normalise(source_path).split("/")
        if self.csv_files:
            return _longest_match(self._configured_reports(), parts)
        folder = PurePath(source_path).parent
        for _ in range(SEARCH_DEPTH):
            table = self._folder_reports(Path(folder))
            if table is not None:
                return _longest_match(table, parts)
            if folder.parent == folder:
                break
            folder = folder.parent
        return None


def _longest_match(table: dict[str, str], parts: list[str]) -> str | None:
    for start in range(len(parts)):
        text = table.get("/".join(parts[start:]))
        if text is not None:
            return text
    return None
