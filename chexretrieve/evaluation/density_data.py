"""The images of the density evaluation (``chexretrieve eval density``), embedded and cached.

In distribution: phantom cases of one world (not the encoder's training world), split by index into
the *archive* (the density is fitted on it) and *held-out* phantoms (new in-distribution queries).
Out of distribution, every group embedded by the same encoder:

* ``pydicom-data: <file>``: every file of pydicom-data (``data_store``) and of pydicom's own test
  files that decodes to one greyscale image, whatever its modality, except the PA chest RG1
  (reported as its own group: a real chest film, not a phantom): RG3 (an extremity CR) in four
  encodings (uncompressed / JPEG 2000, reversible / irreversible), MR, CT, US, secondary captures.
* phantom renders that are not frontal chest films: rotated 90° (the phantom world draws only
  AP/PA, so this stands in for a wrong orientation or a lateral, it is not a true lateral),
  upside down, grey levels inverted (a MONOCHROME1 file shown as MONOCHROME2), and the chest
  cropped away (the top-left corner, 40 % of each side, enlarged: shoulder and background).
* synthetic non-radiographs: uniform and Gaussian noise, smoothed noise, 1/f ("natural-image-like")
  textures, gratings and constant grey.

SIMULATION: the phantom world is synthetic; figures measured on it say nothing about clinical
performance.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.cache import cache_folder, write_atomically
from chexretrieve.findings import FINDINGS

#: bumped whenever the images drawn for a group change (old caches are ignored)
DATA_VERSION = 2
#: what ``density_sets`` tells its progress callback when it reads the sets from the cache
CACHED_MESSAGE = "images and embeddings read from the cache:"
#: pydicom-data files that are real chest films (their own group, not counted as OOD)
CHEST_FILES = ("RG1_UNCR.dcm", "RG1_UNCI.dcm", "RG1_J2KR.dcm", "RG1_J2KI.dcm")


@dataclass(frozen=True)
class DensitySets:
    """Embeddings (float32 unit rows) and what each row is."""

    encoder_id: str
    archive: np.ndarray
    heldout: np.ndarray
    # truth of each archive / held-out phantom (columns FINDINGS, 0/1)
    archive_truth: pd.DataFrame
    heldout_truth: pd.DataFrame
    # out-of-distribution rows and their group ("pydicom-data", "phantom transform", "synthetic")
    ood: np.ndarray
    ood_group: np.ndarray
    ood_name: np.ndarray
    # real chest films (pydicom-data RG1 in its encodings): neither phantom nor OOD
    chest: np.ndarray
    chest_name: np.ndarray


def _phantoms(seed: int, indices, size: int):
    from chexretrieve.phantom import PhantomConfig, generate_case

    config = PhantomConfig(size=size)
    images, truth = [], []
    for index in indices:
        case = generate_case(seed, int(index), config)
        images.append(case.image)
        truth.append({f: float(bool(case.truth.get(f, False))) for f in FINDINGS})
    return images, pd.DataFrame(truth, columns=list(FINDINGS))


def _resize(image: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(
        Image.fromarray(image.astype(np.float32), mode="F").resize((size, size), Image.BILINEAR),
        dtype=np.float32,
    )


def phantom_transforms(images) -> list[tuple[str, np.ndarray]]:
    """(name, image) renders of phantom chests that are not frontal chest films."""
    out = []
    for i, image in enumerate(images):
        side = image.shape[0]
        corner = image[: int(0.4 * side), : int(0.4 * side)]
        kind = i % 4
        if kind == 0:
            out.append(("rotated 90 degrees", np.ascontiguousarray(np.rot90(image))))
        elif kind == 1:
            out.append(("upside down", np.ascontiguousarray(image[::-1])))
        elif kind == 2:
            out.append(("grey levels inverted", 1.0 - image))
        else:
            out.append(("chest cropped away", np.clip(_resize(corner, side), 0, 1)))
    return out


def synthetic_images(count: int, size: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """(name, image) non-radiographs: noise, smoothed noise, 1/f textures, gratings, flat grey."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    freq = np.sqrt(np.add.outer(np.fft.fftfreq(size) ** 2, np.fft.fftfreq(size) ** 2))
    freq[0, 0] = 1.0
    out = []
    for i in range(count):
        kind = i % 6
        if kind == 0:
            image, name = rng.random((size, size)), "uniform noise"
        elif kind == 1:
            image, name = 0.5 + 0.2 * rng.standard_normal((size, size)), "gaussian noise"
        elif kind == 2:
            blurred = gaussian_filter(rng.standard_normal((size, size)), sigma=rng.uniform(2, 12))
            image, name = 0.5 + blurred / (4 * blurred.std() + 1e-9), "smoothed noise"
        elif kind == 3:
            spectrum = rng.standard_normal((size, size)) + 1j * rng.standard_normal((size, size))
            field = np.real(np.fft.ifft2(spectrum / freq ** rng.uniform(1.0, 2.0)))
            image, name = 0.5 + field / (4 * field.std() + 1e-9), "1/f texture"
        elif kind == 4:
            y, x = np.mgrid[0:size, 0:size] / size
            angle, period = rng.uniform(0, np.pi), rng.uniform(0.03, 0.3)
            wave = np.sin(2 * np.pi * (x * np.cos(angle) + y * np.sin(angle)) / period)
            image, name = 0.5 + 0.4 * wave, "grating"
        else:
            image, name = np.full((size, size), rng.uniform(0.1, 0.9)), "flat grey"
        out.append((name, np.clip(image, 0, 1).astype(np.float32)))
    return out


def pydicom_data_images() -> list[tuple[str, np.ndarray]]:
    """(file name, greyscale pixels in [0, 1]) of every decodable single-image file."""
    from chexretrieve.dicom import RejectedFile, read_radiograph
    from chexretrieve.dicom.config import ReadConfig

    try:
        import data_store  # pydicom-data's package
    except ImportError:  # pragma: no cover - pydicom-data is a dependency
        return []
    config = ReadConfig(allowed_modalities=None)
    out = []
    for path in sorted((Path(data_store.__file__).parent / "data").glob("*.dcm")):
        try:
            radiograph = read_radiograph(path, config)
        except (RejectedFile, ValueError, OSError):
            continue
        pixels = radiograph.pixels
        if pixels.ndim == 2 and min(pixels.shape) >= 16 and float(np.ptp(pixels)) > 0:
            name = f"{path.name} ({radiograph.metadata.modality or 'no modality'})"
            out.append((name, np.asarray(pixels, dtype=np.float32)))
    return out


def _embed(encoder, images, batch: int = 32) -> np.ndarray:
    parts = [
        np.asarray(encoder.embed_images(images[i : i + batch]), dtype=np.float32)
        for i in range(0, len(images), batch)
    ]
    rows = np.concatenate(parts) if parts else np.zeros((0, encoder.embed_dim), np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def density_sets(
    encoder,
    seed: int,
    n_archive: int,
    n_heldout: int,
    n_transforms: int,
    n_synthetic: int,
    size: int = 320,
    cache_dir: Path | None = None,
    progress=None,
) -> DensitySets:
    """Generate (or read from the cache) and embed every set; ``progress(what)`` hears each step."""
    say = progress or (lambda what: None)
    settings = [DATA_VERSION, encoder.encoder_id, seed, n_archive, n_heldout, n_transforms,
                n_synthetic, size]  # fmt: skip
    key = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:20]
    path = Path(cache_dir or cache_folder("eval")) / f"density-sets-{key}.npz"
    if path.is_file():
        try:
            loaded = _load(path)
            say(f"{CACHED_MESSAGE} {path}")
            return loaded
        except (OSError, KeyError, ValueError):
            pass  # damaged: regenerated below
    say(f"phantom archive: {n_archive} cases of world {seed}")
    images, archive_truth = _phantoms(seed, range(n_archive), size)
    archive = _embed(encoder, images)
    say(f"held-out phantoms: {n_heldout}")
    images, heldout_truth = _phantoms(seed, range(n_archive, n_archive + n_heldout), size)
    heldout = _embed(encoder, images)
    start = n_archive + n_heldout
    say(f"phantom renders that are not frontal chests: {n_transforms}")
    source, _ = _phantoms(seed, range(start, start + n_transforms), size)
    transforms = phantom_transforms(source)
    synthetic = synthetic_images(n_synthetic, size, seed)
    say("pydicom-data files")
    files = pydicom_data_images()
    chest = [(n, im) for n, im in files if n.split(" ")[0] in CHEST_FILES]
    other = [(n, im) for n, im in files if n.split(" ")[0] not in CHEST_FILES]
    groups = (
        [("pydicom-data", n) for n, _ in other]
        + [("phantom render", n) for n, _ in transforms]
        + [("synthetic", n) for n, _ in synthetic]
    )
    ood = _embed(encoder, [im for _, im in other + transforms + synthetic])
    chest_rows = _embed(encoder, [im for _, im in chest])
    sets = DensitySets(
        encoder.encoder_id,
        archive,
        heldout,
        archive_truth,
        heldout_truth,
        ood,
        np.array([g for g, _ in groups]),
        np.array([n for _, n in groups]),
        chest_rows,
        np.array([n for n, _ in chest]),
    )
    _save(path, sets)
    return sets


def _save(path: Path, sets: DensitySets) -> None:
    arrays = {
        "archive": sets.archive,
        "heldout": sets.heldout,
        "archive_truth": sets.archive_truth.to_numpy(),
        "heldout_truth": sets.heldout_truth.to_numpy(),
        "ood": sets.ood,
        "ood_group": sets.ood_group.astype(str),
        "ood_name": sets.ood_name.astype(str),
        "chest": sets.chest,
        "chest_name": sets.chest_name.astype(str),
        "encoder_id": np.array(sets.encoder_id),
    }
    write_atomically(path, lambda tmp: np.savez(tmp, **arrays))


def _load(path: Path) -> DensitySets:
    with np.load(path, allow_pickle=False) as data:
        return DensitySets(
            str(data["encoder_id"]),
            data["archive"],
            data["heldout"],
            pd.DataFrame(data["archive_truth"], columns=list(FINDINGS)),
            pd.DataFrame(data["heldout_truth"], columns=list(FINDINGS)),
            data["ood"],
            data["ood_group"],
            data["ood_name"],
            data["chest"],
            data["chest_name"],
        )
