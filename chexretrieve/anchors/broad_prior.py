"""THE rule for which broad sets form the posterior prior (search, serve, the UI and evaluation).

The prior is the newest version of every variant of every ``broad/*`` context found

1. in the anchors folder in use (``--anchors`` / ``$CHEXRETRIEVE_ANCHORS`` / the checkout's
   ``anchors/``): the shipped ``broad/clinical`` and any broad set released there;
2. in the private anchors folder (``$CHEXRETRIEVE_PRIVATE_ANCHORS``, else
   ``$XDG_DATA_HOME/chexretrieve/private-anchors``, else ``~/.local/share/...``), when it exists:
   the corpora ``chexretrieve anchors import-reports`` builds from a user's own reports, kept
   outside the repository because their licences forbid redistribution;

in this order: ``broad/clinical`` first, then the other contexts by name (variants by name). The
sentences are concatenated and a sentence already taken is dropped (exact text). Every caller asks
:func:`broad_prior_sets` / :func:`prior_rows`, so a search and an evaluation on the same folders
use the same prior, sentence for sentence.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
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


def broad_prior_sets(
    root: str | Path | None = None, private_root: str | Path | None = None
) -> list[AnchorSet]:
    """The sets that form the prior, in prior order (see the module doc); may be empty.

    ``private_root`` None = :func:`private_anchors_root`; a folder that does not exist adds
    nothing. AnchorSetError when both folders hold the same ``id@version``.
    """
    sets = _broad_sets(Path(root) if root is not None else None)
    private = Path(private_root) if private_root is not None else private_anchors_root()
    if private.is_dir():
        own = {s.key: s for s in sets}
        for extra in _broad_sets(private):
            if extra.key in own:
                raise AnchorSetError(
                    f"{extra.key} is both in the anchors folder ({own[extra.key].path}) and in the "
                    f"private anchors folder ({extra.path}); remove one"
                )
            sets.append(extra)
    return sorted(sets, key=lambda s: (s.context != PRIMARY_CONTEXT, s.context, s.variant or ""))


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
