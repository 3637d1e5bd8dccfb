"""Thumbnails at ingest time, and a backfill for stores ingested before they existed.

``ThumbnailReader`` wraps the decoding reader: in the decoding worker, before the encoder's
preprocessing replaces the display pixels, it renders a small PNG (``chexretrieve.dicom.
thumbnail_png``) onto the radiograph; the pipeline stores it in the same transaction as the image.
A thumbnail that cannot be made never rejects the image (the UI then renders from the file).

``backfill_thumbnails(store, ...)`` reads the source file of every image that has no thumbnail and
stores one (``chexretrieve ingest --thumbnails-only``); files that are gone or unreadable are
counted and skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chexretrieve.store import Store, Thumbnail

Reader = Callable[[str, Any], Any]


def make_thumbnail(pixels: Any, max_side: int) -> bytes | None:
    """PNG bytes of ``pixels`` (display float in [0, 1]), or None when they cannot be rendered."""
    from chexretrieve.dicom.thumbnails import thumbnail_png

    try:
        return thumbnail_png(pixels, max_side)
    except Exception:  # noqa: BLE001 - a thumbnail is a convenience, never a reason to reject
        return None


@dataclass(frozen=True)
class ThumbnailReader:
    """A reader whose radiographs carry ``thumbnail_png`` (picklable when ``reader`` is)."""

    reader: Reader  # path, read config -> Radiograph
    max_side: int  # longest side of the thumbnail in pixels

    def __call__(self, path: str, read_config: Any) -> Any:
        radiograph = self.reader(path, read_config)
        fields = (
            {f.name for f in dataclasses.fields(radiograph)}
            if dataclasses.is_dataclass(radiograph)
            else set()
        )
        if "thumbnail_png" not in fields:
            return radiograph  # a reader of another kind (tests): left as it is
        png = make_thumbnail(radiograph.pixels, self.max_side)
        return dataclasses.replace(radiograph, thumbnail_png=png)


def thumbnail_of(radiograph: Any, max_side: int) -> Thumbnail | None:
    """The store's Thumbnail of a decoded radiograph, when its reader made one."""
    png = getattr(radiograph, "thumbnail_png", None)
    return Thumbnail(png=png, max_side=max_side) if png else None


@dataclass
class BackfillReport:
    images: int = 0  # images that needed a thumbnail
    written: int = 0
    missing_files: int = 0  # no source path, or the file is gone
    unreadable: int = 0  # the file no longer decodes

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def backfill_thumbnails(
    store: Store,
    max_side: int = 256,
    read_config: Any = None,
    *,
    replace_other_sizes: bool = False,
    batch_size: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> BackfillReport:
    """Give every image without a thumbnail one, read from its source file (in this process).

    ``replace_other_sizes`` also redoes thumbnails made for another ``max_side``. Each batch of
    ``batch_size`` thumbnails is one transaction; a rerun continues where a stopped one ended.
    """
    import os

    from chexretrieve.dicom import ReadConfig, read_radiograph

    if max_side < 1:
        raise ValueError(f"thumbnail size must be at least 1 pixel, got {max_side}")
    read_config = read_config if read_config is not None else ReadConfig()
    todo = store.images_needing_thumbnail(max_side if replace_other_sizes else None)
    report = BackfillReport(images=len(todo))
    batch: dict[int, Thumbnail] = {}
    for done, (image_id, path) in enumerate(todo, start=1):
        if not path or not os.path.isfile(path):
            report.missing_files += 1
        else:
            try:
                pixels = read_radiograph(path, read_config).pixels
            except ValueError:
                pixels = None
            png = make_thumbnail(pixels, max_side) if pixels is not None else None
            if png is None:
                report.unreadable += 1
            else:
                batch[image_id] = Thumbnail(png=png, max_side=max_side)
        if len(batch) >= batch_size or (done == len(todo) and batch):
            report.written += store.put_thumbnails(batch, replace=replace_other_sizes)
            batch = {}
        if progress is not None:
            progress(done, len(todo))
    return report
