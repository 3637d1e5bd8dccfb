"""Small helpers shared by the scale tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _root_conftest():
    """tests/conftest.py by path: the module name 'conftest' is taken by every folder's conftest."""
    name = "chexretrieve_tests_root_conftest"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


require = _root_conftest().require
require_binary = _root_conftest().require_binary


def import_sibling_tests(folder: str, module: str):
    """Import tests/<folder>/<module>.py under its pytest name (rootdir 'prepend' import mode)."""
    path = str(TESTS / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module)


def store_content(store, encoder_id: str) -> dict:
    """What an ingest decided, independent of ids, run numbers and timestamps: per SOP UID the
    image metadata, the embedding bytes and the labels."""
    import numpy as np

    gallery = store.gallery(encoder_id)
    labels = store.labels_frame()
    content = {}
    for row, image_id in enumerate(gallery.image_ids):
        meta = gallery.metadata.loc[int(image_id)].to_dict()
        meta = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in meta.items()}
        if image_id in labels.index:
            values = labels.loc[image_id].to_dict()
            meta["labels"] = {k: v for k, v in values.items() if not np.isnan(v)}
        meta["embedding"] = gallery.vectors[row].tobytes()
        content[meta["sop_uid"]] = meta
    return content


def make_phantom_archive(out: Path, n: int, size: int = 64, seed: int = 3) -> Path:
    """A small phantom archive (real DICOM files + labels.csv) written in-process."""
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    write_archive(out, ArchiveConfig(n=n, seed=seed, workers=1), PhantomConfig(size=size))
    return out
