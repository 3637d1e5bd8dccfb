"""Where the search service gets its gallery and anchors in the application: the store + files."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chexretrieve.anchors import AnchorSet, anchor_cache_key, find_anchor_sets, latest_anchor_set
from chexretrieve.anchors.anchor_set import AnchorSetError
from chexretrieve.anchors.broad_prior import Prior, prior_rows, resolve_prior
from chexretrieve.findings import canonical_finding
from chexretrieve.search.gallery import Gallery
from chexretrieve.search.service import AnchorSetRef

logger = logging.getLogger(__name__)

#: the shipped broad clinical-text corpus, first of the prior (chexretrieve.anchors.broad_prior)
BROAD_PRIOR_CONTEXT = "broad/clinical"


def gallery_from_store(store, encoder_id: str) -> Gallery:
    """The archive of one encoder, with labels (NaN where unknown), ready for search."""
    stored = store.gallery(encoder_id)
    labels = store.labels_frame(stored.image_ids).reindex(stored.image_ids)
    return Gallery(
        encoder_id=encoder_id,
        image_ids=np.asarray(stored.image_ids, dtype=np.int64),
        embeddings=np.ascontiguousarray(stored.vectors, dtype=np.float32),
        metadata=stored.metadata,
        labels=labels,
    )


class StoreAnchorProvider:
    """Anchor sets from the versioned files, embedded once per (version, encoder) in the store."""

    def __init__(self, store, encoder, root: Path | None = None, prior: Sequence[str] = ()):
        self.store = store
        self.encoder = encoder
        self.root = root
        self.prior_names = tuple(prior)  # private broad sets named with --prior
        self._memory: dict[tuple[str, str], np.ndarray] = {}
        self._warned = False

    def _warn_not_stored(self, anchor_set: AnchorSet) -> None:
        if self._warned:
            return
        self._warned = True
        logger.warning(
            "anchor embeddings of %s (and maybe other sets) for encoder %s are not in the store "
            "%s; they are computed in memory for this process, which never writes the store. "
            "Store them once with `chexretrieve anchors embed --db URL --encoder SPEC`",
            anchor_set.key,
            self.encoder.encoder_id,
            getattr(self.store, "label", "?"),
        )

    def resolve(self, finding: str, key: str | None) -> AnchorSet:
        finding = canonical_finding(finding)
        if key is None:
            return latest_anchor_set(finding, root=self.root)
        for anchor_set in find_anchor_sets(self.root, finding=finding):
            if anchor_set.key == key:
                return anchor_set
        known = ", ".join(s.key for s in find_anchor_sets(self.root, finding=finding)) or "none"
        raise ValueError(f"no anchor set {key!r} for {finding} (available: {known})")

    def embed(self, anchor_set: AnchorSet) -> np.ndarray:
        cache_key = (anchor_set.key, anchor_set.content_hash)
        if cache_key in self._memory:
            return self._memory[cache_key]
        encoder_id = self.encoder.encoder_id
        version = str(anchor_set.version)
        stored_key = anchor_cache_key(anchor_set.content_hash, self.encoder)
        matrix = self.store.get_anchor_embeddings(anchor_set.id, version, stored_key, encoder_id)
        if matrix is None:
            matrix = np.asarray(self.encoder.embed_texts(list(anchor_set.sentences)), np.float32)
            if getattr(self.store, "read_only", False):
                self._warn_not_stored(anchor_set)  # a read command never writes the store
            else:
                self.store.register_encoder(
                    encoder_id, self.encoder.embed_dim, self.encoder.inv_temperature
                )
                self.store.put_anchor_embeddings(
                    anchor_set.id, version, stored_key, encoder_id, matrix
                )
        self._memory[cache_key] = matrix
        return matrix

    def anchor_set(self, finding: str, key: str | None) -> AnchorSetRef:
        anchor_set = self.resolve(finding, key)
        return AnchorSetRef(
            key=anchor_set.key,
            content_hash=anchor_set.content_hash,
            sentences=tuple(anchor_set.sentences),
            embeddings=self.embed(anchor_set),
            polarities=tuple(entry.polarity for entry in anchor_set.entries),
        )

    def prior(self) -> Prior:
        """The prior's sets for this store (``resolve_prior``: the rule evaluation uses too)."""
        return resolve_prior(
            self.root, store=getattr(self.store, "identity", None), named=self.prior_names
        )

    def prior_description(self) -> list[dict]:
        """Key, content hash and folder of each set of the prior (search output, JSON, UI)."""
        return self.prior().describe()

    def broad_prior(self) -> tuple[str, np.ndarray]:
        """(fingerprint, embeddings) of the prior (:meth:`prior`), each sentence once."""
        prior = self.prior()
        sets = list(prior.sets)
        if not sets:
            raise AnchorSetError(
                f"no broad anchor set (broad/...) under {self.root or 'the anchors folder'} or "
                "the private anchors folder: the posterior geometries need one as prior"
            )
        matrices = [self.embed(s) for s in sets]
        rows = prior_rows(sets)
        stacked = np.stack([matrices[i][j] for i, j in rows]).astype(np.float32)
        return prior.fingerprint, stacked
