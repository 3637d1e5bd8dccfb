"""A small archive as real ones differ, for the viewer tests: phantoms written MONOCHROME1 and
MONOCHROME2 (12-bit) and RG1 of pydicom-data (a real 15-bit MONOCHROME1 CR, 1841 x 1955); and the
file's own pixels read with pydicom (not with the code under test) under the DICOM linear VOI
written out here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

#: the percentiles of each preset, written out here from the viewer's documentation
PRESETS = {"lung": (1.0, 60.0), "mediastinum": (30.0, 95.0), "bone": (60.0, 99.5)}


def file_values(path: Path) -> tuple[np.ndarray, bool, tuple[float, float] | None]:
    """The file's modality values, whether low values show white, its first window (pydicom)."""
    import pydicom

    ds = pydicom.dcmread(path)
    stored = ds.pixel_array.astype(np.float64)
    values = stored * float(ds.get("RescaleSlope", 1) or 1) + float(ds.get("RescaleIntercept", 0))
    window = None
    if "WindowCenter" in ds:
        c, w = ds.WindowCenter, ds.WindowWidth
        c = c[0] if isinstance(c, pydicom.multival.MultiValue) else c
        w = w[0] if isinstance(w, pydicom.multival.MultiValue) else w
        window = (float(c), float(w))
    return values, ds.PhotometricInterpretation == "MONOCHROME1", window


def voi(values: np.ndarray, center: float, width: float, invert: bool) -> np.ndarray:
    """DICOM PS3.3 C.11.2.1.2 linear VOI to 0..255, the nearest grey level; inverted for
    MONOCHROME1."""
    low, high = center - 0.5 - (width - 1) / 2, center - 0.5 + (width - 1) / 2
    y = ((values - (center - 0.5)) / (width - 1) + 0.5) * 255
    y = np.where(values <= low, 0.0, np.where(values > high, 255.0, y))
    grey = np.rint(y).astype(np.uint8)
    return 255 - grey if invert else grey


def preset_of(values: np.ndarray, invert: bool, preset: str) -> tuple[float, float]:
    """A preset's window on one image's own values: its percentiles, mirrored when low values
    show white."""
    low, high = PRESETS[preset]
    if invert:
        low, high = 100 - high, 100 - low
    a, b = np.percentile(values, [low, high])
    return (a + b) / 2, max(1.0, b - a)


def build_world(root: Path):
    """Environment and archive (16 phantoms, MONOCHROME1 and 2, and RG1) under ``root``;
    yields {"root", "db_url"} and restores the environment afterwards."""
    saved = dict(os.environ)
    for name in ("home", "gradio"):
        (root / name).mkdir()
    anchors = root / "anchors"
    shutil.copytree(Path(__file__).resolve().parents[2] / "anchors", anchors)
    os.environ.update(
        HOME=str(root / "home"), GRADIO_TEMP_DIR=str(root / "gradio"),
        GRADIO_ANALYTICS_ENABLED="False", CHEXRETRIEVE_TEST_ENCODERS="1",
        CHEXRETRIEVE_ANCHORS=str(anchors), CHEXRETRIEVE_AUDIT_LOG=str(root / "audit.jsonl"),
    )  # fmt: skip
    from chexretrieve.dicom import pydicom_test_file
    from chexretrieve.encoders.stand_in import load_stand_in
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig
    from chexretrieve.store import open_store

    archive = root / "phantom"
    write_archive(archive, ArchiveConfig(n=16, seed=3, workers=1), PhantomConfig(size=192))
    real = root / "real"
    real.mkdir()
    shutil.copy(pydicom_test_file("RG1_UNCI.dcm"), real / "rg1.dcm")
    db_url = f"sqlite:///{root / 'archive.sqlite'}"
    store = open_store(db_url)
    report = ingest_paths(
        [archive, real], store, load_stand_in("stand-in"), IngestConfig(workers=0),
        labels=read_label_csv(archive / "labels.csv"),
    )  # fmt: skip
    assert report.counts["ingested"] == 17
    store.close()
    try:
        yield {"root": root, "db_url": db_url}
    finally:
        os.environ.clear()
        os.environ.update(saved)
