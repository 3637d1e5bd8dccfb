"""What one encoder (checkpoint) contributes to an evaluation: image and anchor embeddings.

The sources (``chexretrieve.evaluation.sources``) build one :class:`EncodedView` per checkpoint over
one shared :class:`~chexretrieve.evaluation.protocol.LabelledArchive`; the runner never
touches images, text or files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class AnchorVariant:
    """One independently generated anchor set of one finding, embedded by one encoder."""

    name: str  # variant label shared across checkpoints (e.g. the anchor file's version)
    embeddings: np.ndarray  # (N, d) unit vectors


@dataclass(frozen=True)
class AnchorBank:
    """All anchor embeddings of one encoder."""

    findings: dict[str, tuple[AnchorVariant, ...]]  # finding -> its variants
    broad: np.ndarray | None = None  # (M, d) broad clinical corpus: the posterior models' prior
    nuisance: dict[str, np.ndarray] = field(default_factory=dict)  # nuisance set name -> (N, d)

    def variants(self, finding: str) -> tuple[AnchorVariant, ...]:
        found = self.findings.get(finding, ())
        if not found:
            raise ValueError(
                f"no anchor sets for {finding!r}; generate or add anchors/{finding} variants first"
            )
        return found

    def pooled(self, finding: str) -> np.ndarray:
        """All variants of a finding stacked (the pool the anchor-budget draws come from)."""
        return np.concatenate([v.embeddings for v in self.variants(finding)], axis=0)


@dataclass(frozen=True)
class EncodedView:
    """One checkpoint's embeddings of the archive (rows in archive order) and of the anchors."""

    encoder_id: str  # the encoder's stable id (one cell dimension of the intervals)
    inv_temperature: float  # the encoder's exp(logit_scale)
    embeddings: np.ndarray  # (n_images, d) unit vectors in archive order
    anchors: AnchorBank

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2:
            raise ValueError(f"embeddings must be (images, dim), got shape {self.embeddings.shape}")
