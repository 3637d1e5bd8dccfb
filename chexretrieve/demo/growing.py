"""A first `make demo`: the phantom archive generated and ingested in parts, the page opened after
the first part (issue 34, item 3).

The phantom generator's worker processes write the images in index order; each part of
``DemoConfig.part_images`` images is ingested (with its labels) as soon as its files are written,
while the workers go on with the next part. Once ``DemoConfig.first_page_images`` images are
stored, ``on_first_page`` runs (the demo opens the page there); the rest of
the archive keeps arriving and the page's searches see it (the search service reloads the gallery
when the archive's revision moves). The archive's CSV files are written by the generator at the
end, so a later run reuses the complete archive; a reports.csv of the images so far is kept
beside them meanwhile (the page reads it again when it changes).
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chexretrieve.demo.config import DemoConfig


@dataclass
class GrowingArchive:
    """Ingests the phantom archive part by part while it is generated."""

    config: DemoConfig
    store: object
    encoder: object
    # called once, when first_page_images images are stored (or at the end, for a small archive)
    on_first_page: Callable[[int], None]
    # lines for the console (one per part)
    say: Callable[[str], None] = print
    stored: int = 0
    seconds_ingesting: float = 0.0
    _label_rows: list[list[str]] = field(default_factory=list)
    _report_rows: list[list[str]] = field(default_factory=list)
    _pending: list[list[str]] = field(default_factory=list)
    _opened: bool = False

    def case_written(self, rows: dict[str, list]) -> None:
        """``write_archive``'s ``on_case``: one more image is on disk."""
        self._pending.append(rows["label"])
        self._report_rows.append(rows["report"])
        wanted = self.config.first_page_images if not self._opened else self.config.part_images
        if len(self._pending) >= wanted:
            self.flush()

    def flush(self) -> None:
        """Ingest the images written since the last part; open the page once enough are in."""
        if self._pending:
            self._ingest(self._pending)
            self._label_rows += self._pending
            self._pending = []
        if not self._opened and (
            self.stored >= self.config.first_page_images or self.stored == self.config.n_images
        ):
            self._opened = True
            self.on_first_page(self.stored)

    def _ingest(self, rows: list[list[str]]) -> None:
        from chexretrieve.ingest.config import IngestConfig
        from chexretrieve.ingest.labels import read_label_csv
        from chexretrieve.ingest.pipeline import ingest_paths
        from chexretrieve.phantom.archive import CHEXPERT_COLUMNS

        archive = self.config.archive_dir
        part = self.config.data_dir / "part-labels.csv"
        _write_csv(part, CHEXPERT_COLUMNS, rows)
        _write_csv(archive / "reports.csv", ("Path", "Report"), self._report_rows)
        started = time.perf_counter()
        # decoding in this thread: the generator's workers already use the cores, and a part's
        # worker processes would cost their start-up every part
        report = ingest_paths(
            [archive / row[0] for row in rows], self.store, self.encoder, IngestConfig(workers=0),
            labels=read_label_csv(part),
        )  # fmt: skip
        took = time.perf_counter() - started
        self.seconds_ingesting += took
        part.unlink(missing_ok=True)
        done = report.counts["ingested"] + report.counts["already-present"]
        self.stored += done
        problems = report.problems
        self.say(
            f"ingested {self.stored:,} of {self.config.n_images:,} phantoms (this part: {done} "
            f"in {took:.1f} s{f', {problems} refused' if problems else ''})"
        )


def _write_csv(path: Path, header: tuple[str, ...], rows: list[list[str]]) -> None:
    """Written whole and moved into place: a reader never sees half a file."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    temporary = path.with_name(path.name + ".partial")
    temporary.write_text(buffer.getvalue(), encoding="utf-8")
    temporary.replace(path)
