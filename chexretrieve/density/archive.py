"""One archive's fitted density: the vMF mixture, its reference scores and its named components.

An :class:`ArchiveDensity` is fitted from one encoder's gallery (ids, unit embeddings, labels) and
kept as one sealed ``.npz`` file (no pickles; :mod:`chexretrieve.density.density_file`: keyed seal,
provenance, values checked on save and load) under the cache root, keyed by the store, the encoder
and the store's generation (``Store.archive_revision()``). It also records the gallery fingerprint
and the fitted image ids, so a later reader can say exactly how far the archive has moved since
(``drift``), and never uses a stale fit without saying so (:mod:`chexretrieve.density.provider`).

What it holds:
* ``model``: the mixture, its K chosen by held-out likelihood (or BIC) among the candidates,
  fitted on all images or, above ``DensityConfig.fit_sample``, on a seeded random sample.
* ``log_density``: every archive image's log-density under the model (in-sample), for rarity.
* ``reference``: the scores a query is ranked against for its percentile. With the held-out
  criterion these are the held-out 20 % of the archive scored by the model fitted without them,
  i.e. what *new* in-distribution images score (in-sample scores are higher, as the model has
  seen them, and would flag too many ordinary queries); with BIC, the in-sample scores.
* ``threshold``: the ``ood_percentile``-th percentile of the reference: below it, a query is OOD.
* ``ood_model``: which score ``reference`` and ``threshold`` are of: the mixture's log-density
  (``movmf``, the default), or a Ledoit–Wolf Gaussian's (``gaussian``: it flagged more of the
  evaluation's out-of-distribution images, see docs/density.md). Rarity and concepts are always
  the mixture's.
* ``components``: each component named by the labels that dominate it among labelled archive
  images, "No Finding" included, and by the anchor sentences nearest it (both sides centred on
  their own mean, past the image-text modality gap) that agree with those labels: positive
  sentences of its findings, negative sentences for a No Finding component, any sentence when
  it has no dominant label. Unconstrained, the nearest sentence contradicted the labels of the
  heaviest (normal) components of the phantom evaluation (eval/reports/density-phantom).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chexretrieve.density.config import DensityConfig
from chexretrieve.density.density_file import (
    FORMAT,
    DensityFileError,
    check_density,
    check_provenance,
    provenance,
    read_density_file,
    write_density_file,
)
from chexretrieve.findings import FINDINGS
from chexretrieve.geometry.bessel import vmf_mean_length
from chexretrieve.geometry.density_baselines import GaussianDensity
from chexretrieve.geometry.movmf_density import MovMFDensity, select_movmf_density

#: anchor sentences and labels kept per component name
NAMED_SENTENCES = 3
NAMED_LABELS = 3
#: a label dominates a component when its weighted positive rate is at least this, and at least
#: LABEL_LIFT times its rate in the whole labelled archive (or halfway from it to 1, if lower)
LABEL_RATE = 0.5
LABEL_LIFT = 1.5
#: the label of a labelled image with no pathology positive or uncertain (devices allowed)
NO_FINDING = "No Finding"
PATHOLOGIES = tuple(f for f in FINDINGS if f != "Support Devices")


@dataclass(frozen=True)
class ComponentName:
    component: int
    weight: float
    # "Finding: sentence" of the anchor sentences nearest the component's mean direction
    sentences: tuple[str, ...]
    # findings positive in most of the component's labelled images (and enriched there)
    labels: tuple[str, ...]
    # labelled archive images the component's label rates rest on (responsibility-weighted)
    labelled_mass: float

    def text(self) -> str:
        labels = ", ".join(self.labels) if self.labels else "no dominant label"
        near = self.sentences[0] if self.sentences else "no anchor sentences"
        return f"component {self.component} ({labels}; nearest anchor: {near})"

    def as_dict(self) -> dict:
        return {
            "component": self.component,
            "weight": self.weight,
            "sentences": list(self.sentences),
            "labels": list(self.labels),
            "labelled_mass": self.labelled_mass,
        }


@dataclass(frozen=True)
class AnchorText:
    """One finding's anchor sentences and their (N, d) unit embeddings, for naming components."""

    finding: str
    sentences: tuple[str, ...]
    embeddings: np.ndarray
    # "positive" / "negative" per sentence; empty: unknown (every sentence names any component)
    polarities: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class ArchiveDensity:
    encoder_id: str
    store_label: str
    revision: int
    fingerprint: str
    fitted_at: str
    image_ids: np.ndarray
    log_density: np.ndarray
    reference: np.ndarray
    threshold: float
    ood_percentile: float
    model: MovMFDensity
    criterion: str
    criterion_scores: dict[int, float]
    components: tuple[ComponentName, ...]
    # which score the OOD flag, percentile and threshold use: "movmf", or "gaussian" (then
    # ``gaussian`` holds the Ledoit–Wolf Gaussian and ``reference`` its held-out scores)
    ood_model: str = "movmf"
    gaussian: GaussianDensity | None = None
    # fitting_settings(config) of the fit: a fit made under other settings is not reused
    settings: str = ""

    def ood_score(self, rows) -> np.ndarray:
        """The OOD model's log-density of unit rows (what ``reference`` and ``threshold`` use)."""
        if self.gaussian is not None:
            return self.gaussian.log_density(rows)
        return self.model.log_density(rows)

    @property
    def n_images(self) -> int:
        return int(len(self.image_ids))

    def percentile(self, log_density) -> np.ndarray:
        """Share (0..100) of the reference archive scores at or below each value."""
        values = np.asarray(log_density, dtype=np.float64)
        below = np.searchsorted(self.reference, values, side="right")
        return 100.0 * below / len(self.reference)

    def rarity_order(self) -> np.ndarray:
        """Archive image ids, rarest (lowest log-density) first; ties by id."""
        order = np.lexsort((self.image_ids, self.log_density))
        return self.image_ids[order]

    def rarity_percentile(self) -> np.ndarray:
        """Per archive image: share (0..100) of archive images with a log-density at or below."""
        ranks = np.searchsorted(np.sort(self.log_density), self.log_density, side="right")
        return 100.0 * ranks / len(self.log_density)

    def drift(self, image_ids) -> float:
        """(images added + images removed) / images fitted, against the ids of today's archive."""
        now = np.asarray(image_ids, dtype=np.int64)
        kept = np.intersect1d(self.image_ids, now, assume_unique=False).size
        changed = (len(self.image_ids) - kept) + (len(np.unique(now)) - kept)
        return changed / max(len(self.image_ids), 1)

    def decompose(
        self, embeddings, mass: float = 0.9, posterior=None
    ) -> list[list[tuple[int, float]]]:
        """Per row: the fewest (component, posterior) pairs, largest first, covering ``mass``
        (``posterior``: the rows' P(k | x) when already computed)."""
        if posterior is None:
            posterior = self.model.posterior(embeddings)
        out = []
        for row in posterior:
            order = np.argsort(-row, kind="stable")
            cumulative = np.cumsum(row[order])
            count = int(np.searchsorted(cumulative, mass - 1e-12) + 1)
            out.append([(int(k), float(row[k])) for k in order[: min(count, len(order))]])
        return out

    # ------------------------------------------------------------------------- file format
    def check(self) -> None:
        """ValueError naming the first value a fit cannot hold (density_file.check_density)."""
        check_density(self)

    def save(self, path: Path, *, sealed: bool = True) -> None:
        """Write the fit as one sealed ``.npz`` (chexretrieve.density.density_file); ValueError
        when a value is not what a fit holds (nothing written), SealError without the install's
        key, OSError when the folder cannot be written. ``sealed=False`` only for a caller that
        seals the file itself."""
        check_density(self)
        meta = {
            "format": FORMAT,
            "encoder_id": self.encoder_id,
            "store_label": self.store_label,
            "revision": self.revision,
            "fingerprint": self.fingerprint,
            "fitted_at": self.fitted_at,
            "threshold": self.threshold,
            "ood_percentile": self.ood_percentile,
            "criterion": self.criterion,
            "criterion_scores": {str(k): v for k, v in self.criterion_scores.items()},
            "components": [c.as_dict() for c in self.components],
            "ood_model": self.ood_model,
            "settings": self.settings,
            "provenance": provenance(self),
        }
        extra = {}
        if self.gaussian is not None:
            extra = {f"gaussian_{k}": np.asarray(v) for k, v in self.gaussian.to_arrays().items()}
        arrays = {
            **extra,
            "image_ids": self.image_ids,
            "log_density": self.log_density,
            "reference": self.reference,
            **self.model.to_arrays(),
        }
        write_density_file(path, arrays, meta, provenance(self), sealed)

    @classmethod
    def load(
        cls, path: Path, *, expect: Mapping | None = None, sealed: bool = True
    ) -> ArchiveDensity:
        """Read a saved fit, verified before use: DensityFileError (a ValueError naming the
        file and the first problem) for a file that is unreadable, truncated, of another format,
        unsealed, forged, fitted for other inputs than ``expect`` (keys of
        ``density_file.provenance``: store, encoder, revision, ...) or holding values no fit
        holds. ``sealed=False`` only for a caller that checked the file's seal itself."""
        path = Path(path)
        arrays, meta, inputs = read_density_file(path, sealed)
        try:
            density = cls._from_file(arrays, meta)
            check_density(density)
        except (KeyError, ValueError, TypeError) as exc:
            reason = str(exc) if isinstance(exc, ValueError) else f"it lacks {exc}"
            raise DensityFileError(path, reason) from None
        check_provenance(path, density, inputs, expect)
        return density

    @classmethod
    def _from_file(cls, data: dict, meta: dict) -> ArchiveDensity:
        model = MovMFDensity.from_arrays(data)
        gaussian = None
        if meta.get("ood_model", "movmf") == "gaussian":
            gaussian = GaussianDensity.from_arrays(
                {k: data[f"gaussian_{k}"] for k in ("mean", "covariance", "shrinkage")}
            )
        return cls(
            encoder_id=str(meta["encoder_id"]),
            store_label=str(meta["store_label"]),
            revision=int(meta["revision"]),
            fingerprint=str(meta["fingerprint"]),
            fitted_at=str(meta["fitted_at"]),
            image_ids=np.asarray(data["image_ids"]),
            log_density=np.asarray(data["log_density"], dtype=np.float64),
            reference=np.asarray(data["reference"], dtype=np.float64),
            threshold=float(meta["threshold"]),
            ood_percentile=float(meta["ood_percentile"]),
            model=model,
            criterion=str(meta["criterion"]),
            criterion_scores={int(k): float(v) for k, v in meta["criterion_scores"].items()},
            components=tuple(
                ComponentName(
                    int(c["component"]),
                    float(c["weight"]),
                    tuple(c["sentences"]),
                    tuple(c["labels"]),
                    float(c["labelled_mass"]),
                )
                for c in meta["components"]
            ),
            ood_model=str(meta.get("ood_model", "movmf")),
            gaussian=gaussian,
            settings=str(meta.get("settings", "")),
        )


def fitting_settings(config: DensityConfig) -> str:
    """The settings a fit depends on, as one string (a fit under others is refitted)."""
    return json.dumps(
        [FORMAT, list(config.candidates), config.criterion, config.seed, config.ood_percentile,
         config.ood_model, config.fit_sample]
    )  # fmt: skip


def density_folder(root: Path, store_label: str, encoder_id: str) -> Path:
    """One folder per (store, encoder): a readable encoder slug plus a hash of both names."""
    digest = hashlib.sha256(f"{store_label}\n{encoder_id}".encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder_id)[:40]
    return Path(root) / f"{slug}-{digest}"


def density_path(root: Path, store_label: str, encoder_id: str, revision: int) -> Path:
    return density_folder(root, store_label, encoder_id) / f"revision-{int(revision):012d}.npz"


def saved_revisions(root: Path, store_label: str, encoder_id: str) -> list[tuple[int, Path]]:
    """(revision, path) of the saved fits of one (store, encoder), newest first."""
    folder = density_folder(root, store_label, encoder_id)
    found = []
    for path in folder.glob("revision-*.npz"):
        match = re.fullmatch(r"revision-(\d+)\.npz", path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def fit_archive_density(
    image_ids,
    embeddings,
    *,
    encoder_id: str,
    store_label: str,
    revision: int,
    fingerprint: str,
    labels=None,
    anchors: Sequence[AnchorText] = (),
    config: DensityConfig | None = None,
) -> ArchiveDensity:
    """Fit the archive's mixture (see the module text). ``labels``: a frame indexed like
    ``image_ids`` with one column per finding (1 / 0 / -1 / NaN), or None."""
    config = config or DensityConfig()
    ids = np.asarray(image_ids, dtype=np.int64)
    x = np.asarray(embeddings, dtype=np.float64)
    if len(ids) < config.min_images:
        raise ValueError(
            f"the archive has {len(ids)} images of encoder {encoder_id}; a density needs at "
            f"least {config.min_images} (DensityConfig.min_images)"
        )
    x = x / np.linalg.norm(x, axis=1, keepdims=True)  # float16/32 storage rounds off the sphere
    sample = x
    if len(x) > config.fit_sample:  # a seeded sample bounds the fit's time; all are scored
        rows = np.random.default_rng(config.seed).choice(len(x), config.fit_sample, replace=False)
        sample = x[np.sort(rows)]
    selection = select_movmf_density(
        sample, candidates=config.candidates, criterion=config.criterion, seed=config.seed
    )
    model = selection.density
    own = model.log_density(x)
    reference = own if selection.heldout_log_density is None else selection.heldout_log_density
    gaussian = None
    if config.ood_model == "gaussian":
        gaussian = GaussianDensity.fit(sample)
        reference = gaussian.log_density(sample)  # BIC: in-sample, as for the mixture
        if selection.heldout_rows is not None:  # held out: scored by a fit without them
            train = np.setdiff1d(np.arange(len(sample)), selection.heldout_rows)
            held = sample[selection.heldout_rows]
            reference = GaussianDensity.fit(sample[train]).log_density(held)
    reference = np.sort(np.asarray(reference, dtype=np.float64))
    posterior = model.posterior(x)
    return ArchiveDensity(
        encoder_id=encoder_id,
        store_label=store_label,
        revision=int(revision),
        fingerprint=fingerprint,
        fitted_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        image_ids=ids,
        log_density=own,
        reference=reference,
        threshold=float(np.percentile(reference, config.ood_percentile)),
        ood_percentile=float(config.ood_percentile),
        model=model,
        criterion=selection.criterion,
        criterion_scores={int(k): float(v) for k, v in selection.scores.items()},
        components=name_components(model, posterior, ids, labels, anchors),
        ood_model=config.ood_model,
        gaussian=gaussian,
        settings=fitting_settings(config),
    )


def _unit_rows(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


def _dominant_labels(posterior, image_ids, labels, count: int):
    """(dominant labels per component, labelled mass per component) from a label frame
    (1 / 0 / -1 / NaN per finding); "No Finding" (no pathology positive or uncertain, devices
    allowed) counts as a label of its own."""
    if labels is None or not len(labels):
        return [()] * count, [0.0] * count
    table = labels.reindex(index=np.asarray(image_ids), columns=list(FINDINGS))
    values = table.to_numpy(dtype=np.float64)
    pathology = values[:, [FINDINGS.index(f) for f in PATHOLOGIES]]
    seen = ~np.isnan(pathology)
    normal = np.where(seen.any(axis=1), (~np.isin(pathology, (1.0, -1.0))).all(axis=1), np.nan)
    values = np.column_stack([values, normal])
    names = (*FINDINGS, NO_FINDING)
    known = ~np.isnan(values)
    positive = values == 1.0
    base = positive.sum(axis=0) / np.maximum(known.sum(axis=0), 1)
    # enriched: LABEL_LIFT x the archive's rate, or halfway to 1 for a label most images carry
    # (No Finding in a mostly normal archive could never reach 1.5 x its rate)
    lift = np.minimum(LABEL_LIFT * base, (1 + base) / 2)
    weighted_known = posterior.T @ known.astype(np.float64)
    rates = (posterior.T @ positive.astype(np.float64)) / np.maximum(weighted_known, 1e-12)
    mass = list(posterior.T @ known.any(axis=1).astype(np.float64))
    dominant = []
    for k in range(count):
        enriched = (rates[k] >= LABEL_RATE) & (rates[k] >= lift) & (weighted_known[k] >= 1.0)
        picks = [j for j in np.argsort(-rates[k], kind="stable") if enriched[j]]
        dominant.append(tuple(names[j] for j in picks[:NAMED_LABELS]))
    return dominant, mass


def _sentence_candidates(labels: tuple[str, ...], findings, polarities) -> np.ndarray | None:
    """Which sentences may name a component with these dominant labels: the positive sentences
    of its findings, or for a No Finding component the negative sentences; None: all."""
    if not labels or polarities is None:
        return None
    wanted = [f for f in labels if f != NO_FINDING]
    if wanted:
        chosen = np.isin(findings, wanted) & (polarities == "positive")
    else:
        chosen = polarities == "negative"
    return chosen if chosen.any() else None


def name_components(model, posterior, image_ids, labels, anchors) -> tuple[ComponentName, ...]:
    """Each component's dominant labels (No Finding included) and the anchor sentences nearest
    it that agree with them (module text)."""
    dominant, mass = _dominant_labels(posterior, image_ids, labels, model.n_components)
    sentences, vectors, findings, polarities = [], [], [], []
    for text in anchors:
        sentences += [f"{text.finding}: {s}" for s in text.sentences]
        vectors.append(np.asarray(text.embeddings, dtype=np.float64))
        findings += [text.finding] * len(text.sentences)
        polarities += list(text.polarities) or [""] * len(text.sentences)
    nearest = [()] * model.n_components
    if vectors:
        # image and text embeddings sit in two cones apart (the modality gap): compare what sets
        # a component apart from the archive's mean with what sets a sentence apart from the
        # mean sentence, not the raw directions (those all pick the same few sentences)
        texts = np.vstack(vectors)
        texts = texts - texts.mean(axis=0)
        lengths = vmf_mean_length(model.dim, model.concentrations)
        offsets = model.directions - (model.weights * lengths) @ model.directions
        cosines = _unit_rows(offsets) @ _unit_rows(texts).T
        polarity = np.asarray(polarities) if all(polarities) else None
        nearest = []
        for k in range(model.n_components):
            allowed = _sentence_candidates(dominant[k], np.asarray(findings), polarity)
            row = cosines[k] if allowed is None else np.where(allowed, cosines[k], -np.inf)
            order = np.argsort(-row, kind="stable")[:NAMED_SENTENCES]
            nearest.append(tuple(sentences[j] for j in order if np.isfinite(row[j])))
    return tuple(
        ComponentName(k, float(model.weights[k]), nearest[k], dominant[k], float(mass[k]))
        for k in range(model.n_components)
    )
