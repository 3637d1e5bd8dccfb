"""Where an evaluation's images, labels and checkpoints come from; each source returns one
``LabelledArchive`` and one ``EncodedView`` per checkpoint.

* ``chexpert_source``: a CheXpert-layout folder (train.csv / valid.csv with ``Path`` and the finding
  columns; images as JPEG/PNG/DICOM) and CheXzero (or any) encoder specs;
* ``store_source``: a chexretrieve store (labels + embeddings already ingested);
* ``phantom_source``: the phantom world generated in memory and embedded by the phantom encoder.

Anchor sentences come from the versioned anchor files (``load_anchor_texts``) and are embedded by
each encoder's text tower. Image and text embeddings are cached as .npy files keyed by the encoder
id and a hash of the inputs, so a second run (or a run with more geometries) does not re-embed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.anchors import anchor_cache_key
from chexretrieve.cache import write_atomically
from chexretrieve.evaluation.inputs import AnchorBank, AnchorVariant, EncodedView
from chexretrieve.evaluation.progress import progress_bar
from chexretrieve.evaluation.protocol import LabelledArchive
from chexretrieve.findings import FINDINGS

#: sentences per text-encoder call (one progress step)
_TEXT_CHUNK = 256

#: CheXpert columns kept beside the findings (nuisance coordinates, frontal filter)
CHEXPERT_EXTRA_COLUMNS = ("Frontal/Lateral", "AP/PA", "Sex", "Age")


# --------------------------------------------------------------------------------- anchor text
@dataclass(frozen=True)
class AnchorTexts:
    """Anchor sentences before embedding (shared by every checkpoint)."""

    findings: dict[
        str, tuple[tuple[str, tuple[str, ...]], ...]
    ]  # finding -> ((variant, sentences))
    broad: tuple[str, ...] = ()  # the broad clinical corpus (prior of the posterior models)
    nuisance: dict[str, tuple[str, ...]] = field(default_factory=dict)  # context -> sentences
    provenance: tuple[str, ...] = ()  # id@version of every set used
    prior: tuple[dict, ...] = ()  # the prior's sets: key, content_hash, folder, private
    prior_fingerprint: str = ""  # one hash of the prior (keys and content hashes, in order)
    prior_left_out: tuple[tuple[str, str], ...] = ()  # private broad sets not taken, and why
    # (id@version, content hash, file) of every set used, in the order of ``provenance``; the broad
    # sets of the prior are the ones whose id starts with "broad"
    records: tuple[tuple[str, str, str], ...] = ()

    @property
    def broad_sets(self) -> tuple[str, ...]:
        """id@version of the broad sets pooled into ``broad`` (the prior)."""
        return tuple(k for k in self.provenance if k.startswith("broad"))


def load_anchor_texts(
    root: str | Path | None = None,
    findings: Sequence[str] = FINDINGS,
    max_variants: int | None = None,
    *,
    store: str | None = None,
    prior: Sequence[str] = (),
) -> AnchorTexts:
    """Newest version of every variant per finding and nuisance/... context; the broad prior
    as ``chexretrieve.anchors.broad_prior`` rules (the same one search uses): a private set joins
    for ``store`` (``Store.identity`` of the evaluated store; None: none) or when in ``prior``."""
    from chexretrieve.anchors import find_anchor_sets, latest_variants
    from chexretrieve.anchors.broad_prior import prior_sentences, resolve_prior

    found: dict[str, tuple] = {}
    used: list = []
    for finding in findings:
        sets = latest_variants(finding, root)
        if max_variants is not None:
            sets = sets[:max_variants]
        found[finding] = tuple((s.variant or s.key, s.sentences) for s in sets)
        used += sets
    contexts = sorted({s.context for s in find_anchor_sets(root) if s.context})
    nuisance: dict[str, tuple[str, ...]] = {}
    for context in contexts:
        if context.startswith("nuisance/"):
            sets = latest_variants(context, root)
            nuisance[context] = tuple(t for s in sets for t in s.sentences)
            used += sets
    chosen = resolve_prior(root, store=store, named=prior)
    used += list(chosen.sets)
    records = tuple((s.key, s.content_hash, str(s.path or "")) for s in used)
    return AnchorTexts(
        found, prior_sentences(chosen.sets), nuisance, tuple(s.key for s in used),
        tuple(chosen.describe()), chosen.fingerprint, chosen.left_out, records,
    )  # fmt: skip


# ------------------------------------------------------------------------------------ caching
class EmbeddingCache:
    """.npy files in ``folder`` named by a hash of (encoder id, kind, inputs); None = no cache."""

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder else None

    @staticmethod
    def key(encoder_id: str, kind: str, items: Iterable[str]) -> str:
        digest = hashlib.sha256()
        digest.update(f"{encoder_id}\n{kind}\n".encode())
        for item in items:
            digest.update(item.encode("utf-8", "surrogatepass") + b"\n")
        return f"{kind}-{encoder_id.replace(':', '_').replace('/', '_')}-{digest.hexdigest()[:20]}"

    def get(self, key: str) -> np.ndarray | None:
        if self.folder is None:
            return None
        path = self.folder / f"{key}.npy"
        return np.load(path) if path.is_file() else None

    def put(self, key: str, matrix: np.ndarray) -> None:
        if self.folder is None:
            return
        path = self.folder / f"{key}.npy"
        write_atomically(path, lambda tmp: np.save(tmp, matrix, allow_pickle=False))


def embed_texts_cached(
    encoder, texts: Sequence[str], cache: EmbeddingCache, show_progress: bool = False
) -> np.ndarray:
    """The encoder's embeddings of ``texts``, from the cache when an entry for exactly these
    sentences and this text tower exists (``cache_keys.text_inputs``, and the tower's embeddings
    of two probe sentences: a text tower packaged apart from the weights, such as MiniLM)."""
    from chexretrieve.evaluation.cache_keys import text_inputs, text_probe

    probe = f"text probe: {text_probe(encoder)}"
    key = EmbeddingCache.key(
        anchor_cache_key(encoder.encoder_id, encoder), "text",
        [*text_inputs(encoder), probe, "", *texts],
    )  # fmt: skip
    cached = cache.get(key)
    if cached is not None and cached.shape[0] == len(texts):
        return cached
    parts = []
    with progress_bar(show_progress) as progress:
        bar = progress.add_task(f"embedding anchors ({encoder.encoder_id})", total=len(texts))
        for start in range(0, len(texts), _TEXT_CHUNK):
            chunk = list(texts[start : start + _TEXT_CHUNK])
            parts.append(np.asarray(encoder.embed_texts(chunk), dtype=np.float32))
            progress.advance(bar, len(chunk))
    matrix = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
    cache.put(key, matrix)
    return matrix


def embed_anchor_bank(
    encoder, texts: AnchorTexts, cache: EmbeddingCache, show_progress: bool = False
) -> AnchorBank:
    """Embed every anchor sentence once (all sets in one call, then split)."""
    pieces: list[tuple[str, ...]] = []
    for variants in texts.findings.values():
        pieces += [sentences for _, sentences in variants]
    pieces += list(texts.nuisance.values())
    pieces.append(texts.broad)
    flat = [t for piece in pieces for t in piece]
    if not flat:
        raise ValueError("no anchor sentences to embed; check the anchors folder")
    matrix = embed_texts_cached(encoder, flat, cache, show_progress)
    offsets = np.cumsum([0] + [len(p) for p in pieces])
    chunks = iter([matrix[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    findings = {
        finding: tuple(AnchorVariant(name, next(chunks)) for name, _ in variants)
        for finding, variants in texts.findings.items()
    }
    nuisance = {context: next(chunks) for context in texts.nuisance}
    broad = next(chunks)
    return AnchorBank(findings, broad if len(broad) else None, nuisance)


# --------------------------------------------------------------------------------- images
def read_image_file(path: Path) -> np.ndarray:
    """A 2-D float32 image in [0, 1] from DICOM, PNG or JPEG (via chexretrieve.dicom)."""
    from chexretrieve.dicom import ReadConfig, read_radiograph

    return read_radiograph(path, ReadConfig()).pixels


def embed_image_files(
    encoder,
    paths: Sequence[Path],
    cache: EmbeddingCache,
    *,
    batch_size: int = 32,
    reader: Callable[[Path], np.ndarray] = read_image_file,
    show_progress: bool = True,
) -> np.ndarray:
    """(n, d) embeddings of image files in order, cached by the encoder and the files (paths,
    sizes, mtimes) and how they are read (``cache_keys``), the reader function and the encoder's
    embeddings of the probe images (its preprocessing as it behaves today)."""
    from chexretrieve.evaluation.cache_keys import encoder_inputs, image_file_inputs, image_probe

    inputs = [*encoder_inputs(encoder), *image_file_inputs(paths)]
    inputs += [
        f"reader: {reader.__module__}.{reader.__qualname__}",
        f"probe: {image_probe(encoder)}",
    ]
    key = EmbeddingCache.key(encoder.encoder_id, "images", inputs)
    cached = cache.get(key)
    if cached is not None and cached.shape[0] == len(paths):
        return cached
    parts = []
    with progress_bar(show_progress) as progress:
        bar = progress.add_task(f"embedding images ({encoder.encoder_id})", total=len(paths))
        for start in range(0, len(paths), batch_size):
            chunk = paths[start : start + batch_size]
            parts.append(np.asarray(encoder.embed_images([reader(p) for p in chunk]), np.float32))
            progress.advance(bar, len(chunk))
    matrix = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
    cache.put(key, matrix)
    return matrix


# ------------------------------------------------------------------------------ CheXpert layout
def _resolve_paths(root: Path, column: pd.Series) -> list[Path]:
    """CheXpert CSV paths ("CheXpert-v1.0-small/train/...") relative to root, its parent, or
    with the first component dropped; the rule that finds the first file is used for all."""
    first = str(column.iloc[0])
    candidates = [
        lambda p: root.parent / p,
        lambda p: root / p,
        lambda p: root / Path(*Path(p).parts[1:]),
    ]
    for rule in candidates:
        if rule(first).is_file():
            paths = [rule(str(p)) for p in column]
            missing = [p for p in paths if not p.is_file()]
            if missing:
                raise ValueError(
                    f"{len(missing)} images listed in the CSVs are missing under {root} "
                    f"(first: {missing[0]}); fix the folder or the CSVs"
                )
            return paths
    raise ValueError(
        f"cannot find image {first!r} under {root} or {root.parent}; the Path column must be "
        "relative to the dataset folder or to its parent (as in CheXpert)"
    )


def chexpert_structure(table: pd.DataFrame) -> pd.DataFrame:
    """Patient, study, view, sex, age and data-set path of each CheXpert row, under the names a
    store's labels frame uses (patient_id, study_id, view_group, view_position, sex, age,
    dataset_path). ``Path`` is
    ``[CheXpert-v1.0-small/]{split}/patientNNNNN/studyM/viewK_frontal.jpg``; the view comes from
    ``Frontal/Lateral`` (else the file name), the projection from ``AP/PA``."""
    paths = table["Path"].astype(str)
    parts = paths.str.extract(r"(?:^|/)(patient\d+)/(study\d+)/([^/]+)$")
    patient = parts[0]
    study = (parts[0] + "/" + parts[1]).where(parts[0].notna() & parts[1].notna())
    if "Frontal/Lateral" in table.columns:
        view = table["Frontal/Lateral"].astype("string").str.strip().str.lower()
    else:
        view = pd.Series(pd.NA, index=table.index, dtype="string")
    from_name = parts[2].str.extract(r"_(frontal|lateral)", expand=False)
    view = view.where(view.isin(["frontal", "lateral"]), from_name).fillna("")
    out = pd.DataFrame(
        {
            "patient_id": patient,
            "study_id": study,
            "view_group": view.astype(str),
            "view_position": table["AP/PA"] if "AP/PA" in table.columns else pd.NA,
            "sex": table["Sex"] if "Sex" in table.columns else pd.NA,
            "age": pd.to_numeric(table["Age"], errors="coerce")
            if "Age" in table.columns
            else np.nan,
            "dataset_path": paths,
        }
    )
    return out


def read_chexpert_folder(
    root: str | Path, *, max_images_per_split: int | None = None, seed: int = 0
) -> tuple[LabelledArchive, list[Path]]:
    """train.csv + valid.csv of a CheXpert-layout folder -> (archive, image paths in its order)."""
    root = Path(root)
    frames = []
    for split, name in (("train", "train.csv"), ("valid", "valid.csv")):
        csv = root / name
        if not csv.is_file():
            raise ValueError(
                f"{csv} not found; --chexpert-root must hold CheXpert's train.csv and valid.csv"
            )
        frame = pd.read_csv(csv)
        if "Path" not in frame.columns:
            raise ValueError(f"{csv} has no 'Path' column; is this a CheXpert labels file?")
        if max_images_per_split is not None and len(frame) > max_images_per_split:
            frame = frame.sample(n=max_images_per_split, random_state=seed).sort_index()
        frames.append(frame.assign(_split=split))
    table = pd.concat(frames, ignore_index=True)
    if table["Path"].duplicated().any():
        dup = table["Path"][table["Path"].duplicated()].iloc[0]
        raise ValueError(f"image {dup!r} is listed twice in train.csv/valid.csv")
    present = [f for f in FINDINGS if f in table.columns]
    if not present:
        raise ValueError(f"the CSVs under {root} have none of the 13 CheXpert finding columns")
    paths = _resolve_paths(root, table["Path"])
    labels = table[present + [c for c in CHEXPERT_EXTRA_COLUMNS if c in table.columns]].copy()
    for finding in present:
        labels[finding] = pd.to_numeric(labels[finding], errors="coerce")
    labels = labels.reset_index(drop=True)
    labels = pd.concat([labels, chexpert_structure(table.reset_index(drop=True))], axis=1)
    archive = LabelledArchive(
        table["Path"].astype(str).to_numpy(), table["_split"].to_numpy(), labels
    )
    return archive, paths


def chexpert_source(
    root: str | Path,
    encoder_specs: Sequence[str],
    texts: AnchorTexts,
    *,
    encoder_config=None,
    cache_dir: str | Path | None = None,
    batch_size: int = 32,
    max_images_per_split: int | None = None,
    show_progress: bool = True,
) -> tuple[LabelledArchive, list[EncodedView]]:
    """Embed a CheXpert-layout folder with every encoder spec (e.g. ``chexzero:/ckpt.pt``)."""
    from chexretrieve.encoders import load_encoder

    if not encoder_specs:
        raise ValueError("no checkpoints given; pass --checkpoint CHECKPOINT.pt (repeatable)")
    archive, paths = read_chexpert_folder(root, max_images_per_split=max_images_per_split)
    cache = EmbeddingCache(cache_dir)
    views = []
    for spec in encoder_specs:
        encoder = load_encoder(spec, config=encoder_config)
        embeddings = embed_image_files(
            encoder, paths, cache, batch_size=batch_size, show_progress=show_progress
        )
        bank = embed_anchor_bank(encoder, texts, cache, show_progress)
        views.append(
            EncodedView(encoder.encoder_id, float(encoder.inv_temperature), embeddings, bank)
        )
    _check_distinct(views)
    return archive, views


def _check_distinct(views: Sequence[EncodedView]) -> None:
    ids = [v.encoder_id for v in views]
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"the same checkpoint was given twice ({ids}); each checkpoint is one interval cell"
        )


# ---------------------------------------------------------------------------------- the store
#: label-frame column <- gallery metadata column, used when the labels frame lacks it
_STORE_FALLBACKS = (
    ("view_position", "view_position"),
    ("patient_id", "patient_id"),
    ("study_id", "study_uid"),
    ("sex", "patient_sex"),
    ("age", "patient_age_years"),
    ("dataset_path", "source_path"),
)


def archived_gallery(store, encoder_id: str):
    """(image ids, embeddings, metadata frame) of one encoder's archive: memory-mapped from the
    archive index when it is current (chexretrieve.index), else read from the store."""
    from types import SimpleNamespace

    from chexretrieve.index import IndexConfig, IndexGallery, IndexUnavailable, index_folder
    from chexretrieve.index.manifest import read_manifest

    try:
        manifest = read_manifest(index_folder(store, encoder_id, IndexConfig()))
    except IndexUnavailable:
        manifest = None
    if manifest is None or manifest.revision != store.archive_revision() or not manifest.rows:
        return store.gallery(encoder_id)
    gallery = IndexGallery(manifest)
    return SimpleNamespace(
        image_ids=gallery.image_ids, vectors=gallery.embeddings, metadata=gallery.metadata
    )


def store_source(
    url: str,
    encoder_specs: Sequence[str],
    texts: AnchorTexts,
    *,
    encoder_config=None,
    cache_dir: str | Path | None = None,
    notes: list[str] | None = None,
    unlabelled: dict[str, int] | None = None,
) -> tuple[LabelledArchive, list[EncodedView]]:
    """Images embedded by every encoder (intersection) that have a label row, with their labels
    and splits, from a store. An image without any label row (a study missing from the label
    files) is neither query nor key; how many were left out is appended to ``notes``, and their
    count per split (the gallery's split; "" when it has none) is written into ``unlabelled``."""
    from chexretrieve.encoders import load_encoder
    from chexretrieve.store import StoreConfig, open_store

    if not encoder_specs:
        raise ValueError("name the encoders whose embeddings to evaluate (--encoder SPEC)")
    store = open_store(config=StoreConfig(url=url, create_if_missing=False))  # read only
    try:
        encoders = [load_encoder(spec, config=encoder_config) for spec in encoder_specs]
        galleries = [archived_gallery(store, e.encoder_id) for e in encoders]
        labels = store.labels_frame(metadata=True)  # patient, study, view, split, path
    finally:
        store.close()
    common = set(galleries[0].image_ids.tolist())
    for g in galleries[1:]:
        common &= set(g.image_ids.tolist())
    ids = np.array(sorted(common), dtype=np.int64)
    if len(ids) == 0:
        raise ValueError(f"the store at {url} holds no image embedded by all of {encoder_specs}")
    labelled = np.isin(ids, labels.index.to_numpy(dtype=np.int64))
    if not labelled.any():
        raise ValueError(
            f"none of the {len(ids)} embedded images in the store at {url} has labels; ingest "
            "them with their label files (--labels) first"
        )
    if notes is not None and not labelled.all():
        notes.append(
            f"{int((~labelled).sum())} embedded images have no labels in the store and were "
            "left out (neither queries nor keys)"
        )
    if unlabelled is not None:
        left_out = galleries[0].metadata.loc[ids[~labelled]]
        split = (
            left_out["split"].fillna("").astype(str)
            if "split" in left_out.columns
            else pd.Series([""] * len(left_out), dtype=str)
        )
        unlabelled.clear()
        unlabelled.update({str(k): int(v) for k, v in split.value_counts().sort_index().items()})
    ids = ids[labelled]
    meta = galleries[0].metadata.loc[ids]
    frame = labels.reindex(ids)
    # a store ingested before data-set ingest kept patient, view and path only in the metadata
    for column, source in _STORE_FALLBACKS:
        if source not in meta.columns:
            continue
        if column not in frame:
            frame[column] = meta[source].to_numpy()
        else:  # fill the gaps only
            frame[column] = frame[column].where(frame[column].notna(), meta[source].to_numpy())
    frame = frame.reset_index(drop=True)
    splits = meta["split"].fillna("").astype(str).to_numpy()
    if "split" in frame.columns:  # the labels frame's split, where it has one
        given = frame["split"].fillna("").astype(str).to_numpy()
        splits = np.where(given != "", given, splits)
    archive = LabelledArchive(ids.astype(str), splits, frame)
    cache = EmbeddingCache(cache_dir)
    views = []
    for encoder, gallery in zip(encoders, galleries, strict=True):
        row = {int(i): r for r, i in enumerate(gallery.image_ids)}
        embeddings = gallery.vectors[[row[int(i)] for i in ids]]
        bank = embed_anchor_bank(encoder, texts, cache)
        views.append(
            EncodedView(encoder.encoder_id, float(encoder.inv_temperature), embeddings, bank)
        )
    _check_distinct(views)
    return archive, views
