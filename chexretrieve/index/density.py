"""The archive density of an index: fitted at build time, scored for appended rows.

``chexretrieve.density.archive.fit_archive_density`` fits on a seeded sample of at most
``DensityConfig.fit_sample`` images and then scores every image; called on a million float32
rows it first copies them to float64 (8 GB). Here the same sample is drawn (the same rule and
seed), the same function fits the mixture on it, and every row is then scored chunk by chunk
from the mapped embeddings, the components named from every row's posterior and labels
(``name_components``): the fit equals ``fit_archive_density`` on the whole archive, in bounded
memory. An update scores only the appended rows (the mixture is kept until more than
``refit_fraction`` of the archive is new, then refitted). The file is
``ArchiveDensity.save``'s ``.npz``, sealed in the manifest by its SHA-256.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.density.archive import (
    ArchiveDensity,
    fit_archive_density,
    fitting_settings,
    name_components,
)
from chexretrieve.density.config import DensityConfig
from chexretrieve.findings import FINDINGS
from chexretrieve.index.columns import label_floats
from chexretrieve.index.manifest import density_digest

#: rows scored at a time
SCORE_ROWS = 32_768


def _unit64(rows) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _scores(density: ArchiveDensity, embeddings, start: int, stop: int, posterior=None):
    """Log-densities of rows [start, stop) (and their posteriors into ``posterior``)."""
    out = np.empty(stop - start, dtype=np.float64)
    for first in range(start, stop, SCORE_ROWS):
        last = min(stop, first + SCORE_ROWS)
        x = _unit64(embeddings[first:last])
        values, post = density.model.log_density_and_posterior(x)
        out[first - start : last - start] = values
        if posterior is not None:
            posterior[first - start : last - start] = post
    return out


def fit_index_density(gallery, store_label: str, anchors, config: DensityConfig) -> ArchiveDensity:
    """The archive density of an IndexGallery, as ``fit_archive_density`` would fit it."""
    n = len(gallery)
    embeddings = gallery.embeddings
    rows = np.arange(n)
    if n > config.fit_sample:  # the rule and seed of fit_archive_density
        rows = np.sort(np.random.default_rng(config.seed).choice(n, config.fit_sample, False))
    labels = pd.DataFrame(label_floats(gallery.label_codes()), columns=list(FINDINGS),
                          index=pd.Index(gallery.image_ids))  # fmt: skip
    fitted = fit_archive_density(
        gallery.image_ids[rows], _unit64(embeddings[rows]), encoder_id=gallery.encoder_id,
        store_label=store_label, revision=gallery.revision, fingerprint=gallery.fingerprint,
        labels=labels.iloc[rows], anchors=anchors, config=config,
    )  # fmt: skip
    if len(rows) == n:
        return fitted
    posterior = np.empty((n, fitted.model.n_components), dtype=np.float64)
    scores = _scores(fitted, embeddings, 0, n, posterior)
    names = name_components(fitted.model, posterior, gallery.image_ids, labels, anchors)
    return dataclasses.replace(
        fitted, image_ids=np.asarray(gallery.image_ids, dtype=np.int64), log_density=scores,
        components=names,
    )  # fmt: skip


def extend_index_density(density: ArchiveDensity, gallery) -> ArchiveDensity:
    """The density with the rows appended since it was scored scored too (the mixture kept)."""
    done = density.n_images
    scores = _scores(density, gallery.embeddings, done, len(gallery))
    return dataclasses.replace(
        density,
        image_ids=np.asarray(gallery.image_ids, dtype=np.int64),
        log_density=np.concatenate([density.log_density, scores]),
        revision=gallery.revision,
        fingerprint=gallery.fingerprint,
    )


def density_action(record: dict | None, rows: int, config: DensityConfig) -> str:
    """'fit', 'extend' or 'keep' for the index's density record and today's row count."""
    if record is None or record.get("settings") != fitting_settings(config):
        return "fit"
    fitted = max(1, int(record["fitted_rows"]))
    if rows < int(record["scored_rows"]) or (rows - fitted) / fitted > config.refit_fraction:
        return "fit"
    return "extend" if rows > int(record["scored_rows"]) else "keep"


def save_density(folder: Path, file: str, density: ArchiveDensity, fitted_rows: int) -> dict:
    """Write the density (``ArchiveDensity.save``) and return its manifest record."""
    path = Path(folder) / file
    path.parent.mkdir(parents=True, exist_ok=True)
    density.save(path)
    return {
        "file": file,
        "sha256": density_digest(path),
        "fitted_rows": int(fitted_rows),
        "scored_rows": int(density.n_images),
        "revision": int(density.revision),
        "settings": density.settings,
    }


def load_density(folder: Path, record: dict) -> ArchiveDensity:
    """The sealed density file (ValueError when its bytes are not the sealed ones)."""
    path = Path(folder) / record["file"]
    if density_digest(path) != record["sha256"]:
        raise ValueError(f"{record['file']} does not match the index's seal")
    return ArchiveDensity.load(path)
