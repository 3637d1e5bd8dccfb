"""Thumbnails of archived images for the results page (no Gradio).

In order: the thumbnail written at ingest (``Store.read_thumbnails``, one query per page), a PNG
persisted by an earlier run (``thumbnail_dir``), else the archived file read and rendered once.
An unreadable file shows a placeholder. Kept in memory (LRU) as pixels and as ``data:`` URIs.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from chexretrieve.ui.render import placeholder, thumbnail
from chexretrieve.ui.results_html import png_bytes_uri, png_data_uri


class ArchiveThumbnails:
    """Thumbnails of one archive's images (the base of :class:`~chexretrieve.ui.handlers.
    CaseLookup`; needs ``self.service``, ``self.store`` and ``self._metadata``)."""

    def __init__(
        self,
        thumbnail_px: int = 256,
        read_config=None,
        thumbnail_cache: int = 1024,
        read_threads: int = 2,
        thumbnail_dir: Path | None = None,
    ):
        self.thumbnail_px = thumbnail_px
        self.read_config = read_config
        self._thumbs: OrderedDict[int, np.ndarray] = OrderedDict()
        self._uris: OrderedDict[int, str] = OrderedDict()
        # PNG bytes of stored thumbnails shown at their own size (no re-encoding for the page)
        self._stored_pngs: dict[int, bytes] = {}
        self._thumb_capacity = thumbnail_cache
        self._thumb_lock = threading.Lock()
        self.read_threads = read_threads
        self._readers: ThreadPoolExecutor | None = None  # started on first use, then kept
        # the one placeholder of unreadable cases, and its data URI once encoded (every such
        # case shows the same pixels: they are encoded once, not per case)
        self._placeholder = placeholder(thumbnail_px)
        self._placeholder.setflags(write=False)  # shared by every unreadable case
        self._placeholder_uri: str | None = None
        # thumbnails persisted between runs (server-side only; None = memory only)
        self.thumbnail_dir = Path(thumbnail_dir) if thumbnail_dir is not None else None

    def _metadata(self, image_id: int) -> dict:  # provided by CaseLookup
        raise NotImplementedError

    def _read_archived(self, image_id: int) -> np.ndarray | None:
        """Display pixels (float32 [0, 1]) of an archived image read from its source file."""
        from chexretrieve.dicom import read_radiograph

        path = self._metadata(image_id).get("source_path")
        if not isinstance(path, str) or not path or not os.path.isfile(path):
            return None
        try:
            return read_radiograph(path, self.read_config).pixels
        except ValueError:
            return None

    def _thumbnail_file(self, image_id: int) -> Path | None:
        """Where a thumbnail persists: named by id, pixel hash and size (never stale)."""
        if self.thumbnail_dir is None:
            return None
        digest = self._metadata(image_id).get("pixel_sha256")
        if not isinstance(digest, str) or not digest:
            return None
        return self.thumbnail_dir / f"{image_id}-{digest[:16]}-{self.thumbnail_px}.png"

    def _stored_thumbnails(self, image_ids: list[int]) -> dict[int, np.ndarray]:
        """Thumbnails written at ingest (one query), at most ``thumbnail_px``; images without one
        (an older store) are left to ``_render_thumbnail``."""
        if self.store is None or not image_ids:
            return {}
        from chexretrieve.dicom import thumbnail_pixels

        found = {}
        for image_id, png in self.store.read_thumbnails(image_ids).items():
            try:
                stored = thumbnail_pixels(png)
            except ValueError:
                continue  # a damaged one: rendered from the file instead
            found[image_id] = thumbnail(stored, self.thumbnail_px)
            if found[image_id] is stored:  # not shrunk: the page can show the stored PNG as is
                with self._thumb_lock:
                    self._stored_pngs[image_id] = png
        return found

    def _render_thumbnail(self, image_id: int, look_in_store: bool = True) -> np.ndarray:
        """The thumbnail of one image: the store's, else the persisted one, else rendered from
        its file (``look_in_store=False``: the caller has just asked the store)."""
        from PIL import Image

        from chexretrieve.dicom import render_for_display

        stored = self._stored_thumbnails([image_id]).get(image_id) if look_in_store else None
        if stored is not None:
            return stored
        path = self._thumbnail_file(image_id)
        if path is not None and path.is_file():
            try:
                with Image.open(path, formats=["PNG"]) as image:
                    return np.asarray(image.convert("L"))
            except (OSError, ValueError):
                pass  # a damaged cache file is rendered again and replaced
        pixels = self._read_archived(image_id)
        if pixels is None:
            return self._placeholder
        thumb = thumbnail(render_for_display(pixels), self.thumbnail_px)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
            Image.fromarray(thumb).save(tmp, format="PNG")
            os.replace(tmp, path)
        return thumb

    def _remember_thumbnail(self, image_id: int, thumb: np.ndarray) -> None:
        with self._thumb_lock:
            self._thumbs[image_id] = thumb
            self._uris.pop(image_id, None)
            while len(self._thumbs) > self._thumb_capacity:
                old, _ = self._thumbs.popitem(last=False)
                self._uris.pop(old, None)
                self._stored_pngs.pop(old, None)

    def case_thumbnail(self, image_id: int) -> np.ndarray:
        """8-bit thumbnail of an archived case (cached; a placeholder when unreadable)."""
        image_id = int(image_id)
        with self._thumb_lock:
            if image_id in self._thumbs:
                self._thumbs.move_to_end(image_id)
                return self._thumbs[image_id]
        thumb = self._render_thumbnail(image_id)
        self._remember_thumbnail(image_id, thumb)
        return thumb

    def thumbnail_uri(self, image_id: int) -> str:
        """The case's thumbnail as a ``data:`` PNG URI (encoded once while it stays cached)."""
        image_id = int(image_id)
        with self._thumb_lock:  # valid only while its pixels are cached (a cleared cache reads)
            uri = self._uris.get(image_id) if image_id in self._thumbs else None
        if uri is None:
            pixels = self.case_thumbnail(image_id)
            with self._thumb_lock:
                png = self._stored_pngs.get(image_id)
            if png is not None:
                uri = png_bytes_uri(png)
            elif pixels is self._placeholder:
                if self._placeholder_uri is None:
                    self._placeholder_uri = png_data_uri(pixels)
                uri = self._placeholder_uri
            else:
                uri = png_data_uri(pixels)
            with self._thumb_lock:
                if image_id in self._thumbs:
                    self._uris[image_id] = uri
        return uri

    def _render_unstored(self, image_id: int) -> np.ndarray:
        """``_render_thumbnail`` of an image the store was just asked for and had none of."""
        return self._render_thumbnail(image_id, look_in_store=False)

    def _reader_pool(self) -> ThreadPoolExecutor:
        """The thumbnail readers, kept between searches (starting threads per page of results
        cost 12 ms of each search)."""
        with self._thumb_lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(
                    self.read_threads, thread_name_prefix="chexretrieve-thumbnails"
                )
            return self._readers

    def prefetch_thumbnails(self, image_ids) -> None:
        """Read the thumbnails not yet cached, each once, in ``read_threads`` threads."""
        with self._thumb_lock:
            wanted = dict.fromkeys(int(i) for i in image_ids)
            missing = [i for i in wanted if i not in self._thumbs]
        stored = self._stored_thumbnails(missing)
        for image_id, thumb in stored.items():
            self._remember_thumbnail(image_id, thumb)
        missing = [i for i in missing if i not in stored]
        if not missing:
            return
        if self.read_threads <= 1 or len(missing) == 1:
            rendered = [self._render_thumbnail(i, look_in_store=False) for i in missing]
        else:
            rendered = list(self._reader_pool().map(self._render_unstored, missing))
        for image_id, thumb in zip(missing, rendered, strict=True):
            self._remember_thumbnail(image_id, thumb)
