"""The default evaluation source: the phantom world, generated in memory and embedded end to end.

Cases ``0..n-1`` of world ``seed`` are drawn by ``chexretrieve.phantom.generate_case`` (the cases
``chexretrieve phantom make --n N --seed S`` writes as DICOM) in worker processes, and embedded by
the phantom encoder in the main process. Labels follow the archive ``phantom make`` writes, which
follows CheXpert: training-split images carry the CheXpert-style *reported* labels (1, 0, -1, blank,
from the synthetic report), validation-split images their TRUE 0/1 labels (``valid.csv``, the way
CheXpert's validation set is radiologist-labelled), so queries and their relevance come from the
truth (``validation_labels="reported"`` keeps the report labels there too). The split is the
generator's patient-level split; ``patient_id`` (a patient has 1-4 studies: the bootstrap's
cluster); ``AP/PA``, ``Sex`` and ``Age`` are kept as nuisance coordinates;
``truth: <finding>`` columns hold the true presence of every image. Labels and embeddings are cached
per (encoder, seed, n, labels, config).

The gallery must be images the encoder never saw: a phantom encoder whose weights record the same
world seed as the evaluation's is refused (:func:`check_disjoint_world`).

SIMULATION: figures measured on phantoms say nothing about clinical performance.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.cache import cache_folder, write_atomically
from chexretrieve.evaluation.config import PhantomSourceConfig
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.progress import progress_bar
from chexretrieve.evaluation.protocol import LabelledArchive
from chexretrieve.evaluation.sources import AnchorTexts, EmbeddingCache, embed_anchor_bank
from chexretrieve.findings import FINDINGS

_CHUNK = 32


def _generate_chunk(
    seed: int, indices: Sequence[int], validation_labels: str = "truth"
) -> tuple[list[np.ndarray], list[dict]]:
    from chexretrieve.phantom import PhantomConfig, generate_case

    images, rows = [], []
    for index in indices:
        case = generate_case(seed, index, PhantomConfig())
        images.append(case.image)
        split = case.metadata["split"]
        if split == "valid" and validation_labels == "truth":
            labels = {f: float(bool(case.truth.get(f, False))) for f in FINDINGS}
        else:
            labels = {f: case.labels.get(f, np.nan) for f in FINDINGS}
        rows.append(
            {
                "image_id": f"phantom-{seed}-{index:06d}",
                "split": split,
                "patient_id": case.metadata["patient_id"],
                **labels,
                "AP/PA": case.metadata["view"],
                "Sex": case.metadata["sex"],
                "Age": case.metadata["age"],
                **{f"truth: {f}": float(case.truth.get(f, False)) for f in FINDINGS},
            }
        )
    return images, rows


def phantom_source(
    config: PhantomSourceConfig,
    texts: AnchorTexts,
    *,
    encoder_spec: str = "phantom",
    encoder_config=None,
    show_progress: bool = True,
) -> tuple[LabelledArchive, list[EncodedView]]:
    """Generate ``config.n_images`` phantom cases, embed them, and embed the anchors."""
    from chexretrieve.encoders import load_encoder
    from chexretrieve.evaluation.cache_keys import (
        encoder_fingerprint,
        phantom_generator_fingerprint,
    )
    from chexretrieve.phantom import PhantomConfig

    if config.n_images < 2:
        raise ValueError(f"the phantom source needs at least 2 images, got {config.n_images}")
    encoder = load_encoder(encoder_spec, config=encoder_config)
    check_disjoint_world(encoder, config.seed)
    folder = cache_folder("eval") if config.cache_dir is None else config.cache_dir
    cache = EmbeddingCache(Path(folder) if folder else None)
    key = phantom_embedding_key(
        config,
        encoder.encoder_id,
        encoder_fingerprint(encoder),
        phantom_generator_fingerprint(config.seed, PhantomConfig()),
    )
    labels_path = Path(folder) / f"{key}.csv" if folder else None
    embeddings = cache.get(key)
    if embeddings is not None and labels_path is not None and labels_path.is_file():
        table = pd.read_csv(labels_path)
    else:
        embeddings, table = _generate_and_embed(config, encoder, show_progress)
        cache.put(key, embeddings)
        if labels_path is not None:
            write_atomically(labels_path, lambda tmp: table.to_csv(tmp, index=False))
    if "patient_id" not in table.columns:  # caches written before patients were kept
        table = table.assign(patient_id=phantom_patient_ids(config.seed, table["image_id"]))
    labels = table.drop(columns=["image_id", "split"]).reset_index(drop=True)
    archive = LabelledArchive(
        table["image_id"].astype(str).to_numpy(), table["split"].astype(str).to_numpy(), labels
    )
    bank = embed_anchor_bank(encoder, texts, cache, show_progress)
    view = EncodedView(encoder.encoder_id, float(encoder.inv_temperature), embeddings, bank)
    return archive, [view]


def phantom_embedding_key(
    config: PhantomSourceConfig, encoder_id: str, encoder_print: dict, generator_print: dict
) -> str:
    """The cache key of one phantom world's labels and embeddings: the world (seed, count, label
    rule, PhantomConfig), ``RENDER_VERSION`` and the generator's fingerprint of its first cases,
    and the encoder's weights hash and probe embeddings (chexretrieve.evaluation.cache_keys)."""
    from chexretrieve.phantom import PhantomConfig

    return EmbeddingCache.key(
        encoder_id,
        "phantom",
        [
            str(config.seed),
            str(config.n_images),
            f"validation labels: {config.validation_labels}",
            repr(PhantomConfig()),
            json.dumps(generator_print, sort_keys=True),  # RENDER_VERSION + pixels of the world
            json.dumps(encoder_print, sort_keys=True),  # weights + preprocessing
        ],
    )


def phantom_patient_ids(seed: int, image_ids) -> list[str]:
    """The patient of each phantom image id ``phantom-SEED-INDEX`` (no image is rendered)."""
    from chexretrieve.phantom import PhantomConfig
    from chexretrieve.phantom.sampling import patient_of

    config = PhantomConfig()
    return [patient_of(seed, int(str(i).rsplit("-", 1)[1]), config).patient_id for i in image_ids]


def encoder_training_seed(encoder) -> int | None:
    """The phantom world seed an encoder was trained on (from its weights' provenance), or None."""
    generator = (getattr(encoder, "provenance", None) or {}).get("generator", {})
    seed = generator.get("seed") if isinstance(generator, dict) else None
    return int(seed) if seed is not None else None


def check_disjoint_world(encoder, seed: int) -> None:
    """Refuse to evaluate on the world an encoder was trained on (its gallery would be the
    encoder's own training images)."""
    trained = encoder_training_seed(encoder)
    if trained is not None and trained == seed:
        raise ValueError(
            f"the encoder {encoder.encoder_id} was trained on phantom world seed {trained}, the "
            f"same world as this evaluation (--phantom-seed {seed}): its gallery would be the "
            "encoder's training images. Evaluate on another world seed (e.g. --phantom-seed "
            f"{0 if trained != 0 else 1}) or train the encoder on another seed "
            "(chexretrieve phantom train --seed ...)"
        )


def _generate_and_embed(config: PhantomSourceConfig, encoder, show_progress: bool):
    chunks = [
        list(range(start, min(start + _CHUNK, config.n_images)))
        for start in range(0, config.n_images, _CHUNK)
    ]
    parts, rows = [], []
    with progress_bar(show_progress) as progress:
        bar = progress.add_task("phantom world: generate + embed", total=config.n_images)
        if config.workers > 1:
            with ProcessPoolExecutor(max_workers=config.workers) as pool:
                results = pool.map(
                    _generate_chunk,
                    [config.seed] * len(chunks),
                    chunks,
                    [config.validation_labels] * len(chunks),
                )
                for images, chunk_rows in results:
                    parts.append(np.asarray(encoder.embed_images(images), dtype=np.float32))
                    rows += chunk_rows
                    progress.advance(bar, len(images))
        else:
            for chunk in chunks:
                images, chunk_rows = _generate_chunk(config.seed, chunk, config.validation_labels)
                parts.append(np.asarray(encoder.embed_images(images), dtype=np.float32))
                rows += chunk_rows
                progress.advance(bar, len(images))
    return np.concatenate(parts), pd.DataFrame(rows)
