"""Reading and rewriting the members of a saved density (.npz) with the standard library's
``zipfile`` and ``numpy.save``, not with the code under test: how the tests damage a file."""

from __future__ import annotations

import io
import zipfile

import numpy as np


def npz_members(data: bytes) -> dict[str, np.ndarray]:
    """Every array of an .npz file's bytes, by name."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {
            name[: -len(".npy")]: np.load(io.BytesIO(archive.read(name)), allow_pickle=False)
            for name in archive.namelist()
        }


def npz_bytes(members: dict[str, np.ndarray]) -> bytes:
    """An .npz file's bytes holding ``members``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, value in members.items():
            buffer = io.BytesIO()
            np.save(buffer, value, allow_pickle=False)
            archive.writestr(f"{name}.npy", buffer.getvalue())
    return out.getvalue()
