"""The embedded image sets of the density evaluation (``chexretrieve eval density``), cached.

Per phantom *world* (a seed the encoders were not trained on), one set of images, embedded by each
encoder:

* ``archive``: cases ``0 .. n_archive − 1`` (every density is fitted on these only);
* ``heldout``: the next ``n_heldout`` cases (new in-distribution queries: the OOD negatives);
* ``control``: the next ``n_control`` cases, scored as if they were OOD: an in-distribution group
  whose AUROC against the held-out phantoms must come out near 0.5;
* ``shifted``: the next ``n_shifted`` source cases, each under every near-distribution shift and
  display error of :mod:`chexretrieve.evaluation.density_images` (paired: the same source cases).

Once per encoder, the *external* images (the same for every world): the pydicom-data and pydicom
test files deduplicated by content (other body parts and modalities), the RG1 chest film,
photographs and synthetic textures.

Cache. One ``.npz`` per (world, encoder) and per (external images, encoder) under the ``eval``
cache folder, keyed (:mod:`chexretrieve.evaluation.cache_keys`) on ``DATA_VERSION``, the world's
settings, ``PhantomConfig``, ``RENDER_VERSION`` and the generator's fingerprint of the world's
first cases, the pixels of every shift applied to a probe case, the pixels of every external
image, and the encoder's weights hash and probe embeddings. Images are generated once per world
and embedded in chunks by every encoder that missed (never all held in memory).

SIMULATION: the phantom world is synthetic; figures measured on it say nothing about clinical
performance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.cache import cache_folder, write_atomically
from chexretrieve.evaluation.cache_keys import (
    cache_key,
    encoder_fingerprint,
    phantom_generator_fingerprint,
    pixels_digest,
)
from chexretrieve.evaluation.config import DensityWorldConfig
from chexretrieve.evaluation.density_images import (
    CHEST_FILES,
    DISPLAY_ERRORS,
    NEAR_IMAGE_SHIFTS,
    dicom_sample_files,
    display_error,
    distinct_images,
    lateral_phantom,
    near_shift,
    photographs,
    synthetic_images,
)
from chexretrieve.findings import FINDINGS

#: bumped whenever what the sets hold changes in a way the fingerprints would not see
DATA_VERSION = 3
#: what the set builders tell their progress callback when they read a set from the cache
CACHED_MESSAGE = "read from the cache:"
#: group names of the external images
FAR_BODY_PARTS = "far: other body parts"
FAR_PHOTOGRAPHS = "far: photographs"
FAR_SYNTHETIC = "far: synthetic"
CHEST_FILM = "real chest film (RG1)"
#: images embedded per encoder call
_CHUNK = 64


@dataclass(frozen=True)
class WorldEmbeddings:
    """One world's sets embedded by one encoder (float32 unit rows)."""

    encoder_id: str
    seed: int
    archive: np.ndarray
    archive_truth: pd.DataFrame  # columns FINDINGS, true presence 0/1
    heldout: np.ndarray
    heldout_truth: pd.DataFrame
    control: np.ndarray
    shifted: np.ndarray
    shifted_group: np.ndarray  # "near" or "display"
    shifted_kind: np.ndarray  # the shift's name
    shifted_source: np.ndarray  # the source phantom's index (the bootstrap's cluster)


@dataclass(frozen=True)
class ExternalEmbeddings:
    """The images that are not phantoms, embedded by one encoder."""

    encoder_id: str
    rows: np.ndarray
    group: np.ndarray  # FAR_BODY_PARTS, FAR_PHOTOGRAPHS, FAR_SYNTHETIC or CHEST_FILM
    name: np.ndarray
    source: np.ndarray  # the picture an image is made from (the bootstrap's cluster)


# --------------------------------------------------------------------------------- the items
def _truth(case) -> dict[str, float]:
    return {f: float(bool(case.truth.get(f, False))) for f in FINDINGS}


def world_items(
    settings: DensityWorldConfig,
) -> Iterator[tuple[str, str, int, np.ndarray, dict | None]]:
    """(group, kind, source index, image, truth or None) of every image of a world, in order."""
    from chexretrieve.phantom import PhantomConfig, generate_case

    config = PhantomConfig(size=settings.size)
    doubled = PhantomConfig(size=settings.size, nuisance_scale=2.0)
    seed = settings.seed
    start = 0
    for group, count in (
        ("archive", settings.n_archive),
        ("heldout", settings.n_heldout),
        ("control", settings.n_control),
    ):
        for index in range(start, start + count):
            case = generate_case(seed, index, config)
            yield group, "", index, case.image, _truth(case)
        start += count
    for index in range(start, start + settings.n_shifted):
        base = generate_case(seed, index, config).image
        rng = np.random.default_rng([seed, index, 7])
        for kind in NEAR_IMAGE_SHIFTS:
            yield "near", kind, index, near_shift(base, kind, rng), None
        image = generate_case(seed, index, doubled).image
        yield "near", "nuisance ranges doubled", index, image, None
        yield (
            "near",
            "lateral-like projection",
            index,
            lateral_phantom(seed, index, settings.size),
            None,
        )
        for kind in DISPLAY_ERRORS:
            yield "display", kind, index, display_error(base, kind), None


def shifts_fingerprint(settings: DensityWorldConfig) -> str:
    """Pixels of every shift and display error of one probe source case (the code that draws
    the shifted groups, whatever the settings name)."""
    probe = DensityWorldConfig(settings.seed, 1, 1, 1, 1, settings.size)
    return pixels_digest(
        image for group, _, _, image, _ in world_items(probe) if group in ("near", "display")
    )


def external_images(synthetic: int = 60, size: int = 320) -> list[tuple[str, str, str, np.ndarray]]:
    """(group, name, source, image) of the external images (module text)."""
    files = dicom_sample_files()
    chest = [(n, im) for n, im in files if n.split(" ")[0] in CHEST_FILES]
    other = [(n, im) for n, im in files if n.split(" ")[0] not in CHEST_FILES]
    out = []
    for first, image, names in distinct_images(other):
        label = first if len(names) == 1 else f"{first} (+{len(names) - 1} other encodings)"
        out.append((FAR_BODY_PARTS, label, first, image))
    out += [(FAR_PHOTOGRAPHS, name, name, image) for name, image in photographs()]
    for i, (name, image) in enumerate(synthetic_images(synthetic, size, seed=0)):
        out.append((FAR_SYNTHETIC, name, f"{name} {i}", image))
    out += [(CHEST_FILM, name, "RG1", image) for name, image in chest]
    return out


# --------------------------------------------------------------------------------- the cache
def world_cache_key(
    settings: DensityWorldConfig, encoder_print: dict, generator_print: dict, shifts_print: str
) -> str:
    """The key of one (world, encoder) entry: every input its embeddings depend on."""
    from chexretrieve.phantom import PhantomConfig

    return cache_key(
        "density-world",
        {
            "data_version": DATA_VERSION,
            "world": asdict(settings),
            "phantom_config": repr(PhantomConfig(size=settings.size)),
            "generator": generator_print,  # RENDER_VERSION + the world's first cases
            "shifts": shifts_print,
            "encoder": encoder_print,  # weights hash + probe embeddings
        },
    )


def external_cache_key(images_print: str, encoder_print: dict) -> str:
    return cache_key(
        "density-external",
        {"data_version": DATA_VERSION, "images": images_print, "encoder": encoder_print},
    )


def _embed_rows(encoder, images: Sequence[np.ndarray]) -> np.ndarray:
    rows = np.asarray(encoder.embed_images(list(images)), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _save(path: Path, arrays: dict) -> None:
    write_atomically(path, lambda tmp: np.savez(tmp, **arrays))


def _load(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, KeyError, ValueError):
        return None  # damaged: recomputed


def world_embeddings(
    encoders: Sequence,
    settings: DensityWorldConfig,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    prints: dict | None = None,
) -> list[WorldEmbeddings]:
    """One world embedded by each encoder (cached; the images drawn once for all that missed).

    ``prints``: encoder_id -> encoder_fingerprint, when already computed."""
    from chexretrieve.phantom import PhantomConfig

    say = progress or (lambda what: None)
    folder = Path(cache_dir or cache_folder("eval"))
    generator = phantom_generator_fingerprint(settings.seed, PhantomConfig(size=settings.size))
    shifts = shifts_fingerprint(settings)
    prints = prints or {}
    paths, found = [], {}
    for encoder in encoders:
        fingerprint = prints.get(encoder.encoder_id) or encoder_fingerprint(encoder)
        path = folder / f"{world_cache_key(settings, fingerprint, generator, shifts)}.npz"
        paths.append(path)
        loaded = _load(path)
        if loaded is not None:
            found[encoder.encoder_id] = loaded
            say(f"world {settings.seed}, {encoder.encoder_id}: {CACHED_MESSAGE} {path.name}")
    missing = [e for e in encoders if e.encoder_id not in found]
    if missing:
        total = settings.n_archive + settings.n_heldout + settings.n_control
        total += settings.n_shifted * (len(NEAR_IMAGE_SHIFTS) + 2 + len(DISPLAY_ERRORS))
        say(
            f"world {settings.seed}: drawing {total} images and embedding them with "
            f"{', '.join(e.encoder_id for e in missing)} (once; later runs read the cache)"
        )
        computed = _embed_world(missing, settings, say, total)
        for encoder, path in zip(encoders, paths, strict=True):
            if encoder.encoder_id in computed:
                _save(path, computed[encoder.encoder_id])
                found[encoder.encoder_id] = computed[encoder.encoder_id]
    return [_world_from(found[e.encoder_id], e.encoder_id, settings.seed) for e in encoders]


def _embed_world(encoders, settings: DensityWorldConfig, say, total: int) -> dict[str, dict]:
    rows = {e.encoder_id: [] for e in encoders}
    groups, kinds, sources, truths = [], [], [], []
    chunk: list[np.ndarray] = []

    def flush() -> None:
        for encoder in encoders:
            rows[encoder.encoder_id].append(_embed_rows(encoder, chunk))
        chunk.clear()

    for group, kind, source, image, truth in world_items(settings):
        groups.append(group)
        kinds.append(kind)
        sources.append(source)
        truths.append(truth or dict.fromkeys(FINDINGS, np.nan))
        chunk.append(image)
        if len(chunk) == _CHUNK:
            flush()
            if len(groups) % (_CHUNK * 8) == 0:
                say(f"world {settings.seed}: {len(groups)} / {total} images")
    if chunk:
        flush()
    meta = {
        "group": np.array(groups),
        "kind": np.array(kinds),
        "source": np.array(sources, dtype=np.int64),
        "truth": pd.DataFrame(truths, columns=list(FINDINGS)).to_numpy(dtype=np.float32),
    }
    return {eid: {"rows": np.concatenate(parts), **meta} for eid, parts in rows.items()}


def _world_from(data: dict, encoder_id: str, seed: int) -> WorldEmbeddings:
    group, rows = data["group"].astype(str), data["rows"]
    truth = pd.DataFrame(data["truth"], columns=list(FINDINGS))
    shifted = np.isin(group, ("near", "display"))

    def pick(name):
        return group == name

    return WorldEmbeddings(
        encoder_id=encoder_id,
        seed=seed,
        archive=rows[pick("archive")],
        archive_truth=truth[pick("archive")].reset_index(drop=True),
        heldout=rows[pick("heldout")],
        heldout_truth=truth[pick("heldout")].reset_index(drop=True),
        control=rows[pick("control")],
        shifted=rows[shifted],
        shifted_group=group[shifted],
        shifted_kind=data["kind"].astype(str)[shifted],
        shifted_source=data["source"][shifted],
    )


def external_embeddings(
    encoders: Sequence,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    prints: dict | None = None,
) -> tuple[list[ExternalEmbeddings], str]:
    """The external images embedded by each encoder (cached), and the digest of their pixels."""
    say = progress or (lambda what: None)
    folder = Path(cache_dir or cache_folder("eval"))
    items = external_images()
    digest = pixels_digest(image for _, _, _, image in items)
    digest = cache_key("images", {"pixels": digest, "names": [(g, n, s) for g, n, s, _ in items]})
    prints = prints or {}
    out = []
    for encoder in encoders:
        fingerprint = prints.get(encoder.encoder_id) or encoder_fingerprint(encoder)
        path = folder / f"{external_cache_key(digest, fingerprint)}.npz"
        data = _load(path)
        if data is None:
            say(f"external images: embedding {len(items)} with {encoder.encoder_id} (once)")
            images = [image for _, _, _, image in items]
            parts = [
                _embed_rows(encoder, images[i : i + _CHUNK]) for i in range(0, len(images), _CHUNK)
            ]
            data = {"rows": np.concatenate(parts)}
            _save(path, data)
        else:
            say(f"external images, {encoder.encoder_id}: {CACHED_MESSAGE} {path.name}")
        out.append(
            ExternalEmbeddings(
                encoder.encoder_id,
                data["rows"],
                np.array([g for g, _, _, _ in items]),
                np.array([n for _, n, _, _ in items]),
                np.array([s for _, _, s, _ in items]),
            )
        )
    return out, digest
