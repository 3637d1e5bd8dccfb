"""Handing decoded pixels from a worker process to the main process through shared memory.

Through a pipe, a 14 MB radiograph crosses in 64 KiB to 1 MiB pieces, each a hand-over between two
processes; on a busy machine that crawls. A fresh shared-memory block per image avoids the pipe but
pays for new tmpfs pages every time (about 25 ms for 14 MB). So each worker keeps a small ring of
blocks that it reuses: it writes image i into slot i mod R and sends the block's name; the main
process copies the pixels out (about 3 ms) when the message arrives.

Why a slot is free again when the worker reuses it: the pool sends a worker its next task only
after it has received and copied an earlier result, and never has more than ``R`` tasks outstanding
at one worker, so by the time the worker holds task i, result i - R has been copied.

The worker creates blocks; the main process unlinks them (when a slot's block is replaced by a
larger one, or the worker is retired). Both share multiprocessing's resource tracker, which removes
any block left behind if the main process is killed.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

#: decoded pixels at least this large travel through shared memory instead of the pipe
SHARED_MEMORY_MIN_BYTES = 1 << 20


@dataclass(frozen=True)
class SharedPixels:
    """Where a result's pixels wait: block name, ring slot, array shape and dtype."""

    name: str
    slot: int
    shape: tuple[int, ...]
    dtype: str


class PixelSlots:
    """Worker side: a ring of reusable shared-memory blocks."""

    def __init__(self, count: int) -> None:
        self._blocks: list[Any] = [None] * max(1, count)
        self._next = 0

    def export(self, result: Any) -> tuple[Any, SharedPixels | None]:
        """(result with its pixels replaced by an empty array, where they are), or
        (result, None) to send it whole: small images, or no usable shared memory."""
        radiograph = getattr(result, "radiograph", None)
        pixels = getattr(radiograph, "pixels", None)
        if (
            not dataclasses.is_dataclass(radiograph)
            or not isinstance(pixels, np.ndarray)
            or pixels.nbytes < SHARED_MEMORY_MIN_BYTES
        ):
            return result, None
        slot = self._next
        block = self._block(slot, pixels.nbytes)
        if block is None:
            return result, None
        self._next = (slot + 1) % len(self._blocks)
        view = np.ndarray(pixels.shape, pixels.dtype, buffer=block.buf)
        view[...] = pixels
        del view
        where = SharedPixels(block.name, slot, tuple(pixels.shape), pixels.dtype.str)
        light = dataclasses.replace(radiograph, pixels=np.empty(0, pixels.dtype))
        return dataclasses.replace(result, radiograph=light), where

    def _block(self, slot: int, nbytes: int):  # noqa: ANN202
        from multiprocessing import shared_memory

        block = self._blocks[slot]
        if block is not None and block.size >= nbytes:
            return block
        if block is not None:
            block.close()  # the main process unlinks it when it sees the new name
            self._blocks[slot] = None
        try:
            block = shared_memory.SharedMemory(create=True, size=nbytes)
        except OSError:
            return None
        descriptor = getattr(block, "_fd", -1)
        try:
            if descriptor >= 0 and hasattr(os, "posix_fallocate"):
                os.posix_fallocate(descriptor, 0, nbytes)  # a full tmpfs fails here, not by SIGBUS
        except OSError:
            block.close()
            block.unlink()
            return None
        self._blocks[slot] = block
        return block

    def close(self) -> None:
        for block in self._blocks:
            if block is not None:
                block.close()


class PixelReceiver:
    """Main-process side, one per worker: attaches the worker's blocks and copies pixels out."""

    def __init__(self) -> None:
        self._blocks: dict[int, Any] = {}

    def receive(self, result: Any, where: SharedPixels) -> Any:
        from multiprocessing import shared_memory

        block = self._blocks.get(where.slot)
        if block is None or block.name != where.name:
            if block is not None:
                _release(block)
            block = shared_memory.SharedMemory(name=where.name)
            self._blocks[where.slot] = block
        view = np.ndarray(where.shape, np.dtype(where.dtype), buffer=block.buf)
        pixels = view.copy()
        del view
        radiograph = dataclasses.replace(result.radiograph, pixels=pixels)
        return dataclasses.replace(result, radiograph=radiograph)

    def release_all(self) -> None:
        for block in self._blocks.values():
            _release(block)
        self._blocks.clear()


def _release(block: Any) -> None:
    try:
        block.close()
        block.unlink()
    except (OSError, BufferError):
        pass
