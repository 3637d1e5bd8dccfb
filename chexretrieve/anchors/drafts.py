"""Anchor-set drafts: an edit is saved, checked and measured before it is published as a new
version (issue 24, defect 3). Published versions stay immutable (``save_new_version``); a draft is
a file beside them that no search ever reads.

A draft records the version it was edited from (``base``): its impact is measured against that
version, and publishing makes it the next version of that set id, whatever was published in
between. Publishing refuses a draft whose sentences share one polarity or that holds an off-topic
sentence: one that names none of the finding's report vocabulary
(``chexretrieve.anchors.topics.mentions_finding``). The text embeddings of the bundled phantom
encoder do not separate such sentences (measured: "The patient likes pizza." has cosine 0.825
with its nearest Pleural Effusion anchor, while 5 % of real anchors are below 0.771 with their
nearest neighbour in their own set), so the flag is the vocabulary's. Reverting publishes a new
version with the sentences of an older one.

Files: ``<anchors root>/drafts/<set id>.draft`` (JSON; the ``.draft`` suffix is not an anchor
file, so listings and searches never see it), one current draft per set id.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.anchors.anchor_set import AnchorSet, AnchorSetError
from chexretrieve.anchors.topics import mentions_finding


@dataclass(frozen=True)
class Draft:
    # the set id the draft revises ("pleural_effusion.a")
    set_id: str
    # id@version it was edited from: its impact is measured against this version
    base: str
    # (sentence, polarity) pairs
    sentences: tuple[tuple[str, str], ...]
    description: str
    author: str
    saved: str  # ISO time of the last save

    def as_set(self, base: AnchorSet) -> AnchorSet:
        """The draft as an (unpublished) anchor set: the base's next version."""
        return base.revised(sentences=self.sentences, description=self.description or None)


def off_topic(sentences, finding: str) -> list[str]:
    """The sentences that name none of the finding's report vocabulary."""
    return [text for text, _ in sentences if not mentions_finding(text, finding)]


def publish_problems(sentences, finding: str) -> list[str]:
    """Why a draft may not be published yet (empty: it may)."""
    problems = []
    polarities = {polarity for _, polarity in sentences}
    if len(polarities) < 2:
        only = next(iter(polarities), "no")
        problems.append(
            f"every sentence is {only}: a set needs positive and negative sentences to tell "
            "the finding's presence from its absence"
        )
    away = off_topic(sentences, finding)
    if away:
        listed = "; ".join(repr(s[:60]) for s in away[:3])
        problems.append(
            f"{len(away)} sentence(s) do not speak of {finding} (none of its report words): "
            f"{listed}{' ...' if len(away) > 3 else ''}"
        )
    return problems


class DraftBook:
    """The drafts under one anchors root."""

    def __init__(self, root: Path):
        self.folder = Path(root) / "drafts"

    def _path(self, set_id: str) -> Path:
        if not set_id or "/" in set_id or set_id.startswith("."):
            raise ValueError(f"not an anchor set id: {set_id!r}")
        return self.folder / f"{set_id}.draft"

    def save(self, base: AnchorSet, sentences, description: str, author: str) -> Draft:
        draft = Draft(
            set_id=base.id,
            base=base.key,
            sentences=tuple((str(t), str(p)) for t, p in sentences),
            description=description.strip(),
            author=author or "anonymous",
            saved=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        path = self._path(base.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**draft.__dict__, "sentences": [list(p) for p in draft.sentences]}
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".draft", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, path)
        return draft

    def get(self, set_id: str) -> Draft | None:
        path = self._path(set_id)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data["sentences"] = tuple(tuple(p) for p in data["sentences"])
            return Draft(**data)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise AnchorSetError(f"draft {path} is unreadable ({exc}); delete it") from None

    def discard(self, set_id: str) -> None:
        try:
            self._path(set_id).unlink()
        except FileNotFoundError:
            pass
