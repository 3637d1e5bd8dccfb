"""Byte-identical copies within an ingest (issue 34, item 17).

A PNG / JPEG image is stored once per pixel content (its UIDs derive from the pixel hash), so a
second file with the same pixels maps to the image the first one stored. Such a file is a *copy*
when the image was stored from another file that is still on disk (a file re-ingested from the
path it was stored from, or from a moved archive whose old path is gone, is the same file, and its
data-set fields and labels are corrected as before). A copy never changes the stored image: not
its split, nor its data-set path or study, nor its labels; otherwise the image's split came from
one file and its path from another, and a fresh ingest counted "splits changed". The outcome says
whose copy it is and, when it was meant for another split, that the same image would have been in
two splits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, select

from chexretrieve.store.schema import Image


@dataclass(frozen=True)
class Copy:
    """A file whose pixels are those of an image stored from another file."""

    # the stored image
    image_id: int
    # the file the image was stored from
    stored_from: str
    # the image's split, and the split this file was meant for (None: none given)
    stored_split: str | None
    wanted_split: str | None

    @property
    def other_split(self) -> bool:
        return self.wanted_split is not None and self.wanted_split != self.stored_split

    def note(self) -> str:
        text = f"byte-identical copy of image {self.image_id} (stored from {self.stored_from})"
        if self.other_split:
            text += (
                f", which is in split {self.stored_split or 'none'}; this file's split "
                f"{self.wanted_split} was not applied (the same image in two splits)"
            )
        return text + "; the image keeps its first file's split, path and labels"


def _same_file(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and os.path.abspath(a) == os.path.abspath(b)


def _wanted_split(item) -> str | None:  # noqa: ANN001 - a BatchItem
    annotation = item.annotation or {}
    if "split" in annotation:
        return annotation["split"]
    return item.record.split if item.record is not None else None


def find_copies(
    conn: Connection, items: Sequence, image_of: Mapping[int, int], first_of: Mapping[int, int]
) -> dict[int, Copy]:
    """position -> Copy for the batch items that are copies. ``image_of``: position -> stored
    image id; ``first_of``: new image id -> the position that stored it in this batch."""
    out: dict[int, Copy] = {}
    stored = [i for p, i in image_of.items() if i not in first_of]
    before: dict[int, tuple[str | None, str | None]] = {}
    for start in range(0, len(stored), 500):
        part = sorted(set(stored[start : start + 500]))
        rows = conn.execute(
            select(Image.id, Image.source_path, Image.split).where(Image.id.in_(part))
        )
        before.update({int(i): (path, split) for i, path, split in rows})
    for position, image_id in image_of.items():
        item = items[position]
        first = first_of.get(image_id)
        if first is not None:
            if first == position:
                continue
            source = items[first].path
            split = _wanted_split(items[first])
        else:
            source, split = before.get(image_id, (None, None))
            if source is None or not os.path.exists(source):
                continue  # the file it was stored from is gone: a moved archive, not a copy
        if _same_file(item.path, source):
            continue
        out[position] = Copy(image_id, source, split, _wanted_split(item))
    return out
