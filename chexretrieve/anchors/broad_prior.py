"""THE rule for which broad sets form the posterior prior (search, serve, the UI and evaluation).

The prior is the newest version of every variant of every ``broad/*`` context found

1. in the anchors folder in use (``--anchors`` / ``$CHEXRETRIEVE_ANCHORS`` / the checkout's
   ``anchors/``): the shipped ``broad/clinical`` and any broad set released there;
2. in the private anchors folder (``$CHEXRETRIEVE_PRIVATE_ANCHORS``, else
   ``$XDG_DATA_HOME/chexretrieve/private-anchors``, else ``~/.local/share/...``), the corpora
   ``chexretrieve anchors import-reports`` builds from a user's own reports, ONLY where the set
   came from the store being searched or evaluated (its ``store`` parameter equals
   ``Store.identity``), or where it is named (``--prior KEY``, which may also pick an older
   version); every other private set is left out and listed as such (:attr:`Prior.left_out`);

in this order: ``broad/clinical`` first, then the other contexts by name (variants by name). The
sentences are concatenated and a sentence already taken is dropped (exact text). Every caller asks
:func:`resolve_prior`, so a search and an evaluation on the same store and folders use the same
prior, sentence for sentence, and name it the same way (:meth:`Prior.describe`: key, content hash,
folder).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.anchors.anchor_set import AnchorSet, AnchorSetError
from chexretrieve.anchors.files import find_anchor_sets, latest_variants

#: environment variable naming the private anchors folder (imported report corpora)
PRIVATE_ANCHORS_ENV = "CHEXRETRIEVE_PRIVATE_ANCHORS"
#: the shipped broad corpus, always first in the prior
PRIMARY_CONTEXT = "broad/clinical"


def private_anchors_root() -> Path:
    """``$CHEXRETRIEVE_PRIVATE_ANCHORS``, else ``$XDG_DATA_HOME/chexretrieve/private-anchors``,
    else ``~/.local/share/chexretrieve/private-anchors`` (never inside the repository)."""
    named = os.environ.get(PRIVATE_ANCHORS_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_DATA_HOME", "").strip() or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "chexretrieve" / "private-anchors"


def _broad_sets(root: Path | None) -> list[AnchorSet]:
    contexts = sorted(
        {s.context for s in find_anchor_sets(root) if s.context and s.context.startswith("broad/")}
    )
    return [s for context in contexts for s in latest_variants(context, root)]


def private_anchor_sets(private_root: str | Path | None = None) -> list[AnchorSet]:
    """Every set (every version) in the private anchors folder; [] when it does not exist."""
    private = Path(private_root) if private_root is not None else private_anchors_root()
    return find_anchor_sets(private) if private.is_dir() else []


def origin_store(anchor_set: AnchorSet) -> str | None:
    """The identity of the store a set's sentences came from (``import-reports --db``), or None."""
    for source in anchor_set.sources.values():
        if source.parameters.get("store"):
            return str(source.parameters["store"])
    return None


@dataclass(frozen=True)
class Prior:
    """The broad sets that form a posterior prior, in prior order, and the private sets left out."""

    sets: tuple[AnchorSet, ...]
    left_out: tuple[tuple[str, str], ...] = ()  # (key, why) of private broad sets not taken

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.sets)

    @property
    def fingerprint(self) -> str:
        return prior_fingerprint(self.sets)

    def describe(self) -> list[dict]:
        """Per set: key, content hash, folder and whether it is private (manifests and JSON)."""
        private = private_anchors_root()
        return [
            {
                "key": s.key,
                "content_hash": s.content_hash,
                "folder": str(Path(s.path).parent) if s.path else None,
                "private": bool(s.path) and _under(Path(s.path), private),
            }
            for s in self.sets
        ]

    def summary(self) -> str:
        """One line a person reads (:func:`prior_line`)."""
        return prior_line(self.describe())


def prior_line(described: Sequence[Mapping]) -> str:
    """Described sets in one line: ``broad.clinical@1 (sha256:1a2b3c4d, /…/anchors/broad); ...``."""
    parts = [
        f"{d['key']} ({d['content_hash'][:15]}, {'private: ' if d.get('private') else ''}"
        f"{d.get('folder') or 'in memory'})"
        for d in described
    ]
    return "; ".join(parts) if parts else "none"


def _under(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def resolve_prior(
    root: str | Path | None = None,
    private_root: str | Path | None = None,
    *,
    store: str | None = None,
    named: Sequence[str] = (),
) -> Prior:
    """The prior for a search or evaluation on ``store`` (``Store.identity``; None: no store, e.g.
    a CheXpert folder or the phantom world) with the private sets ``named`` (``id@version`` or
    ``id`` for the newest). AnchorSetError when a named set does not exist or both folders hold
    the same ``id@version``."""
    sets = _broad_sets(Path(root) if root is not None else None)
    own = {s.key: s for s in sets}
    everything = private_anchor_sets(private_root)
    private = [s for s in everything if s.context and s.context.startswith("broad/")]
    chosen: dict[tuple[str, str], AnchorSet] = {}
    for name in named:
        if name in own or any(s.id == name for s in sets):
            continue  # a set of the anchors folder is in the prior anyway
        matches = [s for s in private if name in (s.key, s.id)]
        if not matches:
            available = ", ".join(sorted(s.key for s in private)) or "none"
            raise AnchorSetError(
                f"--prior {name}: no such broad set in the private anchors folder "
                f"({private_root or private_anchors_root()}); available: {available}"
            )
        pick = max(matches, key=lambda s: s.version)
        chosen[(pick.context, pick.variant or "")] = pick
    left_out = []
    folder = Path(private_root) if private_root is not None else private_anchors_root()
    for extra in _broad_sets(folder) if private else []:
        slot = (extra.context, extra.variant or "")
        origin = origin_store(extra)
        if slot in chosen:
            continue
        if store is not None and origin == store:
            chosen[slot] = extra
        else:
            why = f"from the store {origin}" if origin else "imported from a folder (no store)"
            left_out.append((extra.key, why))
    for extra in chosen.values():
        if extra.key in own:
            raise AnchorSetError(
                f"{extra.key} is both in the anchors folder ({own[extra.key].path}) and in the "
                f"private anchors folder ({extra.path}); remove one"
            )
        sets.append(extra)
    ordered = sorted(sets, key=lambda s: (s.context != PRIMARY_CONTEXT, s.context, s.variant or ""))
    return Prior(tuple(ordered), tuple(left_out))


def broad_prior_sets(
    root: str | Path | None = None,
    private_root: str | Path | None = None,
    *,
    store: str | None = None,
    named: Sequence[str] = (),
) -> list[AnchorSet]:
    """The sets of :func:`resolve_prior`, in prior order; may be empty."""
    return list(resolve_prior(root, private_root, store=store, named=named).sets)


def prior_rows(sets: Sequence[AnchorSet]) -> list[tuple[int, int]]:
    """(set index, sentence index) of the prior's sentences: each text once, first one kept."""
    seen: set[str] = set()
    rows = []
    for i, anchor_set in enumerate(sets):
        for j, text in enumerate(anchor_set.sentences):
            if text not in seen:
                seen.add(text)
                rows.append((i, j))
    return rows


def prior_sentences(sets: Sequence[AnchorSet]) -> tuple[str, ...]:
    return tuple(sets[i].sentences[j] for i, j in prior_rows(sets))


def prior_fingerprint(sets: Sequence[AnchorSet]) -> str:
    """One hash for the whole prior (the sets' keys and content hashes, in order)."""
    digest = hashlib.sha256()
    for anchor_set in sets:
        digest.update(f"{anchor_set.key}={anchor_set.content_hash}\n".encode())
    return "prior:" + digest.hexdigest()[:24]


def resolve_including_private(
    ref: str | Path, root: str | Path | None = None, private_root: str | Path | None = None
) -> AnchorSet:
    """A set of the anchors folder (``resolve_anchor_set``), else of the private anchors folder
    (imported report corpora: ``anchors show``, ``embed`` and ``diff`` name them too)."""
    from chexretrieve.anchors.files import resolve_anchor_set

    try:
        return resolve_anchor_set(ref, root)
    except AnchorSetError as public_error:
        private = Path(private_root) if private_root is not None else private_anchors_root()
        if not private.is_dir():
            raise
        try:
            return resolve_anchor_set(ref, private)
        except AnchorSetError:
            keys = ", ".join(s.key for s in private_anchor_sets(private)) or "none"
            raise AnchorSetError(f"{public_error}; private anchor sets: {keys}") from None
