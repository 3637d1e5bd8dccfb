"""The archive density's file: one ``.npz`` (no pickles), sealed and validated before use.

A fit is written as plain arrays plus ``meta`` (JSON bytes) and ``seal``: a keyed seal
(:mod:`chexretrieve.seal`, the install's key) over the SHA-256 of every array (dtype, shape and
bytes) and the fit's *provenance*: the store, the encoder, the archive revision and gallery
fingerprint it was fitted on, its settings, the file format, the phantom world's render version
and the chexretrieve version that wrote it. Someone who can write the cache folder but does not
hold the key cannot change a value, or pass a fit off as another store's or revision's.

Reading checks, in this order, and names the first failure (:class:`DensityFileError`):
the file opens as a zip whose members all pass their CRC, the format is this version's, the seal
matches (content and provenance), the provenance is the one the caller expects, and the values are
sane (:func:`check_density`): finite, of consistent shapes, the reference scores sorted and the
threshold their ``ood_percentile``-th percentile, the mixture's weights, unit directions and
concentrations, the Gaussian's moments, one name per component. ``save`` runs the same checks, so
a fit with a NaN never reaches the disk either.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from chexretrieve.cache import write_atomically
from chexretrieve.seal import SealError, canonical_json, check_seal, seal

#: file format version (2: sealed, with provenance; older files are refitted)
FORMAT = 2
#: the seal's kind (a seal of another kind of artefact is refused)
SEAL_KIND = "archive-density"
#: how far a stored threshold may sit from the percentile recomputed from the reference scores
THRESHOLD_TOLERANCE = 1e-9
#: how far a mixture direction's norm may sit from 1
UNIT_TOLERANCE = 1e-6


class DensityFileError(ValueError):
    """A saved density that must not be used; ``reason`` says why, ``path`` which file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"the density file {path} cannot be used: {reason}")
        self.path = Path(path)
        self.reason = reason


def provenance(density) -> dict:  # noqa: ANN001 - an ArchiveDensity (no import cycle)
    """What a fit was made from and by: recorded in its file and covered by its seal."""
    from chexretrieve import __version__
    from chexretrieve.phantom.config import RENDER_VERSION

    return {
        "store": density.store_label,
        "encoder": density.encoder_id,
        "revision": int(density.revision),
        "fingerprint": density.fingerprint,
        "settings": density.settings,
        "format": FORMAT,
        "render_version": RENDER_VERSION,
        "chexretrieve": __version__,
    }


def array_digest(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes."""
    values = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{values.dtype.str}|{values.shape}|".encode())
    digest.update(memoryview(values).cast("B") if values.size else b"")
    return digest.hexdigest()


def write_density_file(
    path: Path, arrays: Mapping[str, np.ndarray], meta: Mapping, inputs: Mapping, sealed: bool
) -> None:
    """Write ``arrays`` plus ``meta`` (and the seal over both and ``inputs``) atomically;
    SealError when the install's key cannot be had, OSError when the folder cannot be written."""
    out = {name: np.asarray(value) for name, value in arrays.items()}
    out["meta"] = np.frombuffer(json.dumps(dict(meta)).encode(), dtype=np.uint8)
    if sealed:
        record = seal(SEAL_KIND, {n: array_digest(a) for n, a in out.items()}, inputs)
        out["seal"] = np.frombuffer(canonical_json(record), dtype=np.uint8)
    write_atomically(Path(path), lambda tmp: np.savez(tmp, **out))


def read_density_file(path: Path, sealed: bool = True) -> tuple[dict, dict, dict | None]:
    """(arrays, meta, sealed provenance or None) of a density file; DensityFileError naming the
    first problem (unreadable, truncated, a bad CRC, another format, no or a wrong seal)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DensityFileError(path, "it is missing") from None
    except OSError as exc:
        raise DensityFileError(path, f"it cannot be examined ({exc.strerror or exc})") from None
    if size == 0:
        raise DensityFileError(path, "it is empty (0 bytes)")
    if not zipfile.is_zipfile(path):
        raise DensityFileError(
            path, f"it is not a complete .npz (zip) file ({size} bytes: truncated, or not a fit)"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name]) for name in data.files}  # every CRC checked
    except FileNotFoundError:
        raise DensityFileError(path, "it is missing") from None
    except Exception as exc:  # noqa: BLE001 - zip, zlib, EOF, OS and format errors alike
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
        raise DensityFileError(
            path, f"it cannot be read ({type(exc).__name__}: {detail})"
        ) from None
    raw_meta = arrays.pop("meta", None)
    try:
        meta = json.loads(bytes(raw_meta).decode())
        if not isinstance(meta, dict):
            raise ValueError
    except (TypeError, ValueError, UnicodeDecodeError):
        raise DensityFileError(path, "it holds no readable description (meta)") from None
    if meta.get("format") != FORMAT:
        raise DensityFileError(
            path, f"it has format {meta.get('format')!r}, this version reads {FORMAT} (refit it)"
        )
    inputs = None
    if sealed:
        if "seal" not in arrays:
            raise DensityFileError(path, "it carries no seal")
        try:
            record = json.loads(bytes(arrays.pop("seal")).decode())
            digests = {name: array_digest(a) for name, a in arrays.items()}
            digests["meta"] = array_digest(raw_meta)
            inputs = check_seal(record, SEAL_KIND, files=digests)["inputs"]
        except (ValueError, UnicodeDecodeError) as exc:  # SealError is a ValueError
            reason = str(exc) if isinstance(exc, SealError) else "its seal is not readable"
            raise DensityFileError(path, reason) from None
    arrays.pop("seal", None)
    return arrays, meta, inputs


def check_provenance(path: Path, density, sealed: Mapping | None, expect: Mapping | None) -> None:  # noqa: ANN001
    """DensityFileError when the sealed provenance disagrees with the file's description, or
    with what the caller ``expect``-s (e.g. the store, encoder and revision its name says)."""
    recorded = provenance(density)
    if sealed is not None:
        for name in ("store", "encoder", "revision", "fingerprint", "settings", "format"):
            if sealed.get(name) != recorded[name]:
                raise DensityFileError(path, f"its sealed {name} differs from its description")
    for name, wanted in (expect or {}).items():
        found = recorded.get(name)
        if found != wanted:
            raise DensityFileError(
                path, f"it was fitted for {name} {found!r}, not {wanted!r} (copied or renamed)"
            )


def check_density(density) -> None:  # noqa: ANN001 - an ArchiveDensity
    """ValueError naming the first value that is not what a fit produces (module text)."""
    ids = np.asarray(density.image_ids)
    _need(ids.ndim == 1 and ids.size > 0, f"image ids of shape {ids.shape}")
    _need(np.issubdtype(ids.dtype, np.integer), f"image ids of type {ids.dtype}")
    _need(_distinct(ids), "repeated image ids")
    own = np.asarray(density.log_density)
    _need(own.shape == ids.shape, f"{own.shape} log-densities for {ids.size} images")
    _need(bool(np.isfinite(own).all()), "non-finite log-densities")
    reference = np.asarray(density.reference)
    _need(
        reference.ndim == 1 and reference.size > 0, f"reference values of shape {reference.shape}"
    )
    _need(bool(np.isfinite(reference).all()), "non-finite reference values")
    _need(bool((np.diff(reference) >= 0).all()), "reference values out of order")
    _need(reference.size <= ids.size, f"{reference.size} reference values for {ids.size} images")
    percentile = density.ood_percentile
    _need(0 < percentile < 50, f"an OOD percentile of {percentile}")
    threshold = density.threshold
    _need(np.isfinite(threshold), f"a threshold of {threshold}")
    expected = float(np.percentile(reference, percentile))
    _need(
        abs(threshold - expected) <= THRESHOLD_TOLERANCE * max(1.0, abs(expected)),
        f"a threshold of {threshold:.6g}, not the {percentile:g}th percentile of its reference "
        f"values ({expected:.6g})",
    )
    model = density.model
    _need(bool(np.isfinite(model.weights).all()), "non-finite mixture weights")
    _need(bool(np.isfinite(model.directions).all()), "non-finite mixture directions")
    norms = np.linalg.norm(model.directions, axis=1)
    _need(bool((np.abs(norms - 1.0) <= UNIT_TOLERANCE).all()), "mixture directions off the sphere")
    _need(bool(np.isfinite(model.concentrations).all()), "non-finite concentrations")
    _need(len(density.components) == model.n_components, "a name per component missing")
    _need(
        [c.component for c in density.components] == list(range(model.n_components)),
        "component names out of order",
    )
    scores = list(density.criterion_scores.values())
    _need(bool(np.isfinite(np.asarray(scores, dtype=float)).all()), "non-finite criterion scores")
    _need(density.ood_model in ("movmf", "gaussian"), f"an OOD model {density.ood_model!r}")
    gaussian = density.gaussian
    _need((gaussian is not None) == (density.ood_model == "gaussian"), "a Gaussian mismatch")
    if gaussian is not None:
        dim = model.dim
        _need(gaussian.mean.shape == (dim,), f"a Gaussian mean of shape {gaussian.mean.shape}")
        _need(gaussian.covariance.shape == (dim, dim), "a Gaussian covariance of another shape")
        _need(
            bool(np.isfinite(gaussian.mean).all() and np.isfinite(gaussian.covariance).all()),
            "non-finite Gaussian moments",
        )
        _need(np.allclose(gaussian.covariance, gaussian.covariance.T), "an asymmetric covariance")


def _distinct(ids: np.ndarray) -> bool:
    """No id twice: a comparison of neighbours when the ids are ascending (as a fit stores them;
    np.unique hashed 300k ids in 0.15 s of a server's first search), else after a sort."""
    ordered = ids if bool((ids[1:] >= ids[:-1]).all()) else np.sort(ids)
    return bool((ordered[1:] != ordered[:-1]).all())


def _need(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"it holds {what}")
