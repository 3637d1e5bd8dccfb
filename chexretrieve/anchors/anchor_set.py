"""The anchor-set value object: sentences with polarities, provenance, version and content hash.

An anchor set is the text that defines one semantic context (one CheXpert finding, or a named
context such as ``broad/clinical``). Its identity is ``id@version``; its content is the ordered list
of (polarity, sentence) pairs, fingerprinted by :func:`content_hash`. Provenance (who or what wrote
each sentence) is kept per sentence but is not part of the hash.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from chexretrieve.findings import FINDINGS, canonical_finding, finding_slug

POLARITIES: tuple[str, ...] = ("positive", "negative")
SOURCE_KINDS: tuple[str, ...] = ("curated", "llm", "template")
SCHEMA_ID = "chexretrieve-anchor-set/1"
#: environment variable that points the package at another anchors folder
ANCHORS_ENV = "CHEXRETRIEVE_ANCHORS"

_CONTEXT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*(/[a-z0-9][a-z0-9_-]*)+$")
_VARIANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class AnchorSetError(ValueError):
    """An anchor-set file or object is invalid; ``problems`` lists each one with file and line."""

    def __init__(self, message: str, problems: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


def anchors_root() -> Path:
    """The folder holding the versioned anchor-set files: $CHEXRETRIEVE_ANCHORS or the repo's."""
    override = os.environ.get(ANCHORS_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "anchors"


def content_hash(entries: Iterable[tuple[str, str]]) -> str:
    """sha256 over the canonical JSON of the ordered ``(polarity, text)`` pairs: ``sha256:<hex>``.

    Canonical form: ``[["positive","…"],["negative","…"],…]`` with no spaces and UTF-8 text as-is,
    so the fingerprint does not depend on the file format, key order or indentation.
    """
    pairs = [[polarity, text] for polarity, text in entries]
    canonical = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def anchor_cache_key(key: str, encoder: object) -> str:
    """A text-embedding cache key (an anchor set's content hash, or a hash of the texts) extended by
    the encoder's ``text_fingerprint`` when it has one. An encoder whose tokenizer is a separate
    file (CheXzero's) gives other vectors with another vocabulary or a corrected tokenizer under
    the same weights, so ``encoder_id`` alone would hand back stale vectors."""
    fingerprint = getattr(encoder, "text_fingerprint", None)
    return key if not fingerprint else f"{key}+text:{fingerprint[:16]}"


@dataclass(frozen=True)
class AnchorSource:
    """Where sentences came from: written by a curator, by an LLM, or expanded from a template."""

    kind: str
    model: str | None = None
    prompt: str | None = None
    date: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict, hash=False)
    note: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise AnchorSetError(
                f"source kind {self.kind!r} is not one of {', '.join(SOURCE_KINDS)}"
            )
        if self.kind == "llm" and not (self.model and self.prompt and self.date):
            raise AnchorSetError("an 'llm' source needs model, prompt and date")
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in ("model", "prompt", "date"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.parameters:
            out["parameters"] = dict(self.parameters)
        if self.note is not None:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class AnchorSentence:
    text: str
    polarity: str
    #: key into the owning set's ``sources``
    source: str


def context_id(finding: str | None, context: str | None, variant: str | None) -> str:
    """The set id: ``pleural_effusion.a`` for finding sets, ``nuisance.projection-habitus``."""
    base = finding_slug(finding) if finding else (context or "").replace("/", ".")
    return f"{base}.{variant}" if variant else base


@dataclass(frozen=True)
class AnchorSet:
    """One released version of an anchor set. Build with :meth:`create`; never mutated."""

    id: str
    version: int
    finding: str | None
    context: str | None
    variant: str | None
    description: str
    created: str
    sources: Mapping[str, AnchorSource] = field(hash=False)
    entries: tuple[AnchorSentence, ...]
    content_hash: str
    #: file the set was loaded from or saved to (not part of equality)
    path: Path | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if (self.finding is None) == (self.context is None):
            raise AnchorSetError("an anchor set has exactly one of 'finding' or 'context'")
        if self.finding is not None and self.finding not in FINDINGS:
            raise AnchorSetError(
                f"unknown finding {self.finding!r}; expected one of: {', '.join(FINDINGS)}"
            )
        if self.context is not None and not _CONTEXT_RE.match(self.context):
            raise AnchorSetError(
                f"context {self.context!r} must look like 'group/name' (lower case, digits, - _)"
            )
        if self.variant is not None and not _VARIANT_RE.match(self.variant):
            raise AnchorSetError(f"variant {self.variant!r}: use lower-case letters, digits, - _")
        if not isinstance(self.version, int) or self.version < 1:
            raise AnchorSetError(f"version must be an integer >= 1, got {self.version!r}")
        expected_id = context_id(self.finding, self.context, self.variant)
        if self.id != expected_id:
            raise AnchorSetError(f"id {self.id!r} should be {expected_id!r}")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "entries", tuple(self.entries))
        for entry in self.entries:
            if entry.polarity not in POLARITIES:
                raise AnchorSetError(f"polarity {entry.polarity!r} is not positive or negative")
            if entry.source not in self.sources:
                raise AnchorSetError(f"sentence source {entry.source!r} is not in 'sources'")
        actual = content_hash((e.polarity, e.text) for e in self.entries)
        if self.content_hash != actual:
            raise AnchorSetError(
                f"{self.key}: content_hash {self.content_hash} does not match the sentences "
                f"({actual}); a released version is immutable: save edits as a new version"
            )

    @classmethod
    def create(
        cls,
        *,
        sentences: Iterable[tuple[str, str] | AnchorSentence],
        source: AnchorSource | Mapping[str, AnchorSource],
        finding: str | None = None,
        context: str | None = None,
        variant: str | None = None,
        version: int = 1,
        description: str = "",
        created: str | None = None,
    ) -> AnchorSet:
        """Build a set from ``(text, polarity)`` pairs (or AnchorSentence) and one or more sources.

        With a single AnchorSource every plain pair is attributed to it under the key ``main``.
        ``finding`` may be spelled loosely ('pleural effusion'); it is stored canonically.
        """
        if finding is not None:
            try:
                finding = canonical_finding(finding)
            except ValueError as exc:
                raise AnchorSetError(str(exc)) from None
        sources = dict(source) if isinstance(source, Mapping) else {"main": source}
        default_key = next(iter(sources)) if sources else "main"
        entries = []
        for item in sentences:
            if isinstance(item, AnchorSentence):
                entries.append(item)
            else:
                text, polarity = item
                entries.append(AnchorSentence(text, polarity, default_key))
        return cls(
            id=context_id(finding, context, variant),
            version=version,
            finding=finding,
            context=context,
            variant=variant,
            description=description,
            created=created or _dt.date.today().isoformat(),
            sources=sources,
            entries=tuple(entries),
            content_hash=content_hash((e.polarity, e.text) for e in entries),
        )

    # --- read-only views -------------------------------------------------------------------
    @property
    def key(self) -> str:
        """``id@version``, e.g. ``pleural_effusion.a@1``: the identity caches and reports use."""
        return f"{self.id}@{self.version}"

    @property
    def name(self) -> str:
        """The finding name, or the context name for non-finding sets."""
        return self.finding if self.finding is not None else str(self.context)

    @property
    def sentences(self) -> tuple[str, ...]:
        return tuple(e.text for e in self.entries)

    @property
    def polarities(self) -> tuple[str, ...]:
        return tuple(e.polarity for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def relative_path(self) -> Path:
        """Where this version lives under the anchors root (see README: one file per version)."""
        suffix = f"-{self.variant}" if self.variant else ""
        if self.finding is not None:
            return Path("findings") / finding_slug(self.finding) / f"v{self.version}{suffix}.yaml"
        return Path(f"{self.context}-v{self.version}{suffix}.yaml")

    # --- editing makes a new version -------------------------------------------------------
    def revised(
        self,
        *,
        sentences: Iterable[tuple[str, str] | AnchorSentence] | None = None,
        sources: Mapping[str, AnchorSource] | None = None,
        description: str | None = None,
        created: str | None = None,
    ) -> AnchorSet:
        """The next version (version + 1) with the given changes; this object is unchanged.

        Plain ``(text, polarity)`` pairs keep the source of an existing identical sentence, else
        they are attributed to a ``curated`` source (added to ``sources`` when missing).
        """
        new_sources = dict(sources if sources is not None else self.sources)
        entries = list(self.entries)
        if sentences is not None:
            known = {e.text: e.source for e in self.entries}
            entries = []
            for item in sentences:
                if isinstance(item, AnchorSentence):
                    entries.append(item)
                    continue
                text, polarity = item
                key = known.get(text)
                if key is None or key not in new_sources:
                    key = "curated"
                    new_sources.setdefault(
                        key, AnchorSource(kind="curated", date=_dt.date.today().isoformat())
                    )
                entries.append(AnchorSentence(text, polarity, key))
        used = {e.source for e in entries}
        new_sources = {k: v for k, v in new_sources.items() if k in used} or new_sources
        return replace(
            self,
            version=self.version + 1,
            description=self.description if description is None else description,
            created=created or _dt.date.today().isoformat(),
            sources=new_sources,
            entries=tuple(entries),
            content_hash=content_hash((e.polarity, e.text) for e in entries),
            path=None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The file form (see ``anchors/schema/anchor-set.schema.json``), keys in file order."""
        out: dict[str, Any] = {"schema": SCHEMA_ID, "id": self.id, "version": self.version}
        if self.finding is not None:
            out["finding"] = self.finding
        else:
            out["context"] = self.context
        if self.variant is not None:
            out["variant"] = self.variant
        out["description"] = self.description
        out["created"] = self.created
        out["content_hash"] = self.content_hash
        out["sources"] = {k: v.to_dict() for k, v in self.sources.items()}
        out["sentences"] = [
            {"text": e.text, "polarity": e.polarity, "source": e.source} for e in self.entries
        ]
        return out
