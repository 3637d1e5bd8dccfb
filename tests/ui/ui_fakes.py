"""Small fakes for the UI handler tests: an in-memory gallery whose images are PNG files on disk,
an anchor provider with chosen sentences, and a deterministic encoder (no model, no Gradio); and
for the tests that run `serve` as a process, a store of ingested PNGs and a wait for the server."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from chexretrieve.findings import FINDINGS
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.gallery import Gallery
from chexretrieve.search.service import AnchorSetRef, SearchService

D = 16
N_IMAGES = 30
SENTENCES = tuple(f"effusion sentence {i}" for i in range(11)) + (
    "<script>window.__xss = 1</script> small | effusion",
)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class FakeAnchors:
    """One anchor set per finding (key 'x@1'); the last sentence carries markup."""

    def __init__(self, rng: np.random.Generator):
        self.matrix = unit(rng.standard_normal((len(SENTENCES), D)))
        self.prior = unit(rng.standard_normal((40, D)))

    def anchor_set(self, finding: str, key: str | None) -> AnchorSetRef:
        return AnchorSetRef(
            key=key or "fake_set.a@1",
            content_hash=f"hash-{key}",
            sentences=SENTENCES,
            embeddings=self.matrix,
        )

    def broad_prior(self):
        return "prior", self.prior


class FakeEncoder:
    encoder_id = "fake:ui"
    inv_temperature = 20.0
    embed_dim = D

    def __init__(self, rng: np.random.Generator):
        self.proj = rng.standard_normal((8 * 8, D))

    def embed_images(self, images):
        rows = []
        for image in images:
            small = Image.fromarray(np.asarray(image, dtype=np.float32)).resize((8, 8))
            rows.append(np.asarray(small, dtype=np.float64).reshape(-1))
        flat = np.stack(rows)
        flat = flat - flat.mean(axis=1, keepdims=True) + 1e-3
        return unit(flat @ self.proj).astype(np.float32)

    def embed_texts(self, texts):
        out = []
        for text in texts:
            seed = sum(ord(c) * (i + 1) for i, c in enumerate(text)) % (2**32)
            out.append(np.random.default_rng(seed).standard_normal(D))
        return unit(np.stack(out)).astype(np.float32)


def write_png(path: Path, seed: int, size: int = 48) -> np.ndarray:
    """A seeded greyscale gradient-plus-blob PNG; returns its pixels in [0, 1]."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    cy, cx = rng.uniform(0.2, 0.8, 2)
    image = 0.4 * x + 0.6 * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / 0.02)
    values = np.clip(np.rint(image / image.max() * 255), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(values).save(path)
    return values.astype(np.float32) / 255.0


def _png_sha256(path: Path) -> str:
    from chexretrieve.dicom import pixel_sha256

    with Image.open(path) as image:
        return pixel_sha256(np.asarray(image))


def make_gallery(folder: Path, encoder: FakeEncoder, n: int = N_IMAGES) -> Gallery:
    """n archived PNG images (two per study), embedded by the fake encoder, with metadata."""
    ids = np.arange(1, n + 1, dtype=np.int64)
    pixels = [write_png(folder / f"img{i}.png", seed=int(i)) for i in ids]
    emb = encoder.embed_images(pixels)
    idx = np.arange(n)
    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.3.{i // 2}" for i in idx],
            "view_position": np.where(idx % 3 == 0, "AP", "PA"),
            "patient_sex": np.where(idx % 2 == 0, "M", "F"),
            "patient_age_years": 30 + (idx % 40).astype(float),
            "study_date": [dt.date(2021, 1, 1) + dt.timedelta(days=int(i) * 9) for i in idx],
            "split": np.where(idx % 4 == 0, "valid", "train"),
            "patient_id": [f"SECRET-PID-{i}" for i in idx],
            "source_path": [str(folder / f"img{i}.png") for i in ids],
            "modality": "CR",
            "manufacturer": "Acme",
            "body_part": "CHEST",
            "photometric": "MONOCHROME2",
            "pixel_rows": 48,
            "pixel_columns": 48,
            "source_format": "png",
            # the pixel hash an upload of the same file gets (chexretrieve.dicom.pixel_sha256)
            "pixel_sha256": [_png_sha256(folder / f"img{i}.png") for i in ids],
        },
        index=ids,
    )
    rng = np.random.default_rng(7)
    labels = pd.DataFrame(
        rng.choice([1.0, 0.0, np.nan], size=(n, len(FINDINGS)), p=[0.4, 0.3, 0.3]),
        columns=list(FINDINGS),
        index=ids,
    )
    return Gallery(encoder.encoder_id, ids, emb, meta, labels)


def make_service(tmp_path: Path) -> SearchService:
    rng = np.random.default_rng(3)
    encoder = FakeEncoder(rng)
    gallery = make_gallery(tmp_path / "archive", encoder)
    return SearchService(
        lambda: gallery,
        FakeAnchors(rng),
        encoder=encoder,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )


def ingest_png_cases(url: str, folder: Path, n: int = 10) -> None:
    """``n`` random 64 x 64 PNGs written into ``folder`` (created) and ingested into the store at
    ``url`` with the 32-d stand-in encoder (the `serve --encoder stand-in:0:32` tests')."""
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig, ingest_paths
    from chexretrieve.store import open_store

    folder.mkdir()
    rng = np.random.default_rng(7)
    for i in range(n):
        Image.fromarray((rng.random((64, 64)) * 255).astype(np.uint8)).save(folder / f"c{i}.png")
    store = open_store(url)
    try:
        ingest_paths([folder], store, StandInEncoder(dim=32), IngestConfig(workers=0))
        assert store.count_embeddings() == n
    finally:
        store.close()


def wait_for(condition, what: str, guard_s: float, process: subprocess.Popen | None = None):
    """``condition()``'s first true value, asked every 0.3 s; the test fails when ``process``
    (a `serve`) exits meanwhile, or after ``guard_s`` seconds (a hang guard only)."""
    import pytest

    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            _, err = process.communicate(timeout=10)
            pytest.fail(f"serve exited {process.returncode} while waiting for {what}:\n{err}")
        time.sleep(0.3)
    pytest.fail(f"no {what} within {guard_s} s")
