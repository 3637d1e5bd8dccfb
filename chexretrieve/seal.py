"""Keyed seals of the files chexretrieve derives and reads back (issue 36).

A derived artefact (a feature block, the archive density, a rank calibration, an archive-index
file) is served only when its *seal* matches: an HMAC-SHA256, under a key only this install
holds, of the artefact's kind, the SHA-256 of every file it consists of, and the inputs it was
computed from (encoder, archive revision, anchor-set content hash, settings, ...). A plain
checksum beside a file protects against damage but not against someone who can write the cache
folder: they recompute the checksum. Without the key they cannot recompute the seal.

The key is derived from the install's audit key (``chexretrieve.audit.keys``, 32 random bytes in
a 0600 file outside every data folder, ``$CHEXRETRIEVE_AUDIT_KEY``) by an HMAC with a fixed
label, so an install keeps one secret, and the seal key reveals nothing of the audit key.

Usage::

    record = seal("density", {"density.npz": file_digest(path)}, {"revision": 7, ...})
    ...                                   # store ``record`` (JSON) beside the files
    check_seal(record, "density", {"density.npz": file_digest(path)}, {"revision": 7, ...})

``check_seal`` raises :class:`SealError` whose message says what did not match.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path

#: format of a seal record; a record of another format is rejected
SEAL_FORMAT = 1
#: label of the key derivation (changing it invalidates every seal)
_KEY_LABEL = b"chexretrieve artifact seal v1"
#: bytes read at a time by :func:`file_digest`
DIGEST_CHUNK = 8 << 20

_KEYS: dict[str, bytes] = {}
_KEYS_LOCK = threading.Lock()


class SealError(ValueError):
    """A derived artefact whose seal does not match (damaged, stale, forged or foreign)."""


def seal_key(key_path: Path | None = None) -> bytes:
    """The install's seal key, derived from the audit key at ``key_path`` (default: the audit
    trail's key file, created when missing). Cached per key file for the process."""
    from chexretrieve.audit.keys import AuditIntegrityError, default_key_path, load_or_create_key

    path = Path(key_path) if key_path is not None else default_key_path()
    name = str(path)
    with _KEYS_LOCK:
        cached = _KEYS.get(name)
        if cached is not None:
            return cached
        try:
            secret = load_or_create_key(path)
        except AuditIntegrityError as exc:
            raise SealError(f"no key to seal or check derived files with: {exc}") from None
        key = hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()
        _KEYS[name] = key
        return key


def file_digest(path: Path, chunk: int = DIGEST_CHUNK) -> str:
    """SHA-256 (hex) of a file's bytes, read in chunks (OSError when it cannot be read)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        while True:
            block = os.read(fd, chunk)
            if not block:
                break
            h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def canonical_json(value: object) -> bytes:
    """Key-order independent JSON bytes of ``value`` (what a seal covers)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def _mac(key: bytes, kind: str, files: Mapping[str, str], inputs: Mapping[str, object]) -> str:
    body = canonical_json({"kind": kind, "files": dict(files), "inputs": dict(inputs)})
    message = f"chexretrieve-seal|{SEAL_FORMAT}|".encode() + body
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def seal(
    kind: str,
    files: Mapping[str, str],
    inputs: Mapping[str, object],
    key: bytes | None = None,
) -> dict:
    """A seal record: ``kind``, ``files`` (name -> SHA-256), ``inputs`` and their ``mac``.

    ``inputs`` must be JSON-serialisable (other values are turned into strings)."""
    key = seal_key() if key is None else key
    files = {str(name): str(digest) for name, digest in files.items()}
    inputs = json.loads(canonical_json(inputs))
    return {
        "format": SEAL_FORMAT,
        "kind": kind,
        "files": files,
        "inputs": inputs,
        "mac": _mac(key, kind, files, inputs),
    }


def check_seal(
    record: object,
    kind: str,
    files: Mapping[str, str] | None = None,
    inputs: Mapping[str, object] | None = None,
    key: bytes | None = None,
) -> dict:
    """The record when its MAC is the install's and it matches ``kind``, the ``files`` digests
    measured now and the ``inputs`` asked for (either may be None: not compared, the MAC still
    covers what the record says); :class:`SealError` saying which part does not match."""
    if not isinstance(record, Mapping):
        raise SealError("its seal record is not a JSON object")
    if record.get("format") != SEAL_FORMAT:
        raise SealError(f"its seal record has format {record.get('format')!r}, not {SEAL_FORMAT}")
    try:
        recorded_kind = str(record["kind"])
        recorded_files = {str(k): str(v) for k, v in dict(record["files"]).items()}
        recorded_inputs = dict(record["inputs"])
        mac = str(record["mac"])
    except (KeyError, TypeError, ValueError):
        raise SealError("its seal record lacks kind, files, inputs or mac") from None
    key = seal_key() if key is None else key
    if not hmac.compare_digest(mac, _mac(key, recorded_kind, recorded_files, recorded_inputs)):
        raise SealError(
            "its seal does not match this install's key (edited, forged, or made by another "
            "install)"
        )
    if recorded_kind != kind:
        raise SealError(f"it is sealed as a {recorded_kind!r}, not a {kind!r}")
    if files is not None:
        measured = {str(k): str(v) for k, v in files.items()}
        if set(measured) != set(recorded_files):
            raise SealError(
                f"it consists of {sorted(measured)}, its seal names {sorted(recorded_files)}"
            )
        changed = sorted(n for n in measured if measured[n] != recorded_files[n])
        if changed:
            raise SealError(f"the content of {', '.join(changed)} changed after it was sealed")
    if inputs is not None:
        wanted = json.loads(canonical_json(inputs))
        differing = sorted(
            name
            for name in set(wanted) | set(recorded_inputs)
            if wanted.get(name) != recorded_inputs.get(name)
        )
        if differing:
            raise SealError(f"it was built from other inputs ({', '.join(differing)} differ)")
    return dict(record)


def write_seal(path: Path, record: Mapping) -> None:
    """Write a seal record as JSON, atomically (chexretrieve.cache.write_atomically)."""
    from chexretrieve.cache import write_atomically

    data = canonical_json(dict(record)) + b"\n"
    write_atomically(Path(path), lambda tmp: Path(tmp).write_bytes(data))


def read_seal(path: Path) -> dict:
    """A seal record read from ``path``; SealError when it is missing or not JSON."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise SealError(f"its seal record {Path(path).name} is missing") from None
    except OSError as exc:
        raise SealError(f"its seal record cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise SealError("its seal record is not JSON") from None
