"""Why two images are close for a finding: the anchor sentences behind their divergence.

Each image induces a softmax profile over the finding's anchor sentences,
P(i | λ) = softmax_i(inv_t · λᵀγ_i). The symmetrised KL divergence of two profiles splits exactly
into one non-negative term per anchor, ½ (P_q(i) − P_k(i)) (log P_q(i) − log P_k(i)); the
anchors with the largest terms are what sets the two images apart. The anchors both profiles
weight most (largest √(P_q P_k)) are what the two images share. The explanation uses the
finding's anchor set whatever geometry ranked the results, so it speaks in the anchors' words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax


@dataclass(frozen=True)
class AnchorTerm:
    # the anchor sentence
    sentence: str
    # weight of the sentence in the query's profile
    query_weight: float
    # weight of the sentence in the result's profile
    result_weight: float
    # this anchor's term of the symmetrised KL divergence (>= 0)
    divergence_term: float
    # what the sentence says of the finding: "positive" (present) or "negative" (absent), as its
    # anchor set records it; None when the caller gave no polarities
    polarity: str | None = None


@dataclass(frozen=True)
class Explanation:
    # anchors both images weight most, strongest first
    shared: tuple[AnchorTerm, ...]
    # anchors that contribute most to the divergence between the two images
    differing: tuple[AnchorTerm, ...]
    # the symmetrised KL divergence of the two profiles (sum of every anchor's term)
    divergence: float

    def as_text(self) -> str:
        def said(t: AnchorTerm) -> str:  # what the sentence says of the finding, when known
            return {"positive": " [present]", "negative": " [absent]"}.get(t.polarity or "", "")

        lines = ["Shared by query and result (anchor weights query / result):"]
        lines += [
            f"  • {t.sentence}{said(t)}  ({t.query_weight:.2f} / {t.result_weight:.2f})"
            for t in self.shared
        ]
        lines.append(f"Setting them apart (symmetrised KL {self.divergence:.3f}):")
        lines += [
            f"  • {t.sentence}{said(t)}  ({t.query_weight:.2f} / {t.result_weight:.2f}, "
            f"+{t.divergence_term:.3f})"
            for t in self.differing
        ]
        return "\n".join(lines)


def anchor_profile(x: np.ndarray, anchors: np.ndarray, inv_temperature: float) -> np.ndarray:
    """(n, N) log softmax profiles of unit rows x over the anchors."""
    logits = inv_temperature * (np.asarray(x, dtype=np.float64) @ anchors.T.astype(np.float64))
    return log_softmax(logits, axis=1)


def explain_pair(
    query: np.ndarray,
    result: np.ndarray,
    anchors: np.ndarray,
    sentences: Sequence[str],
    inv_temperature: float,
    top: int = 5,
    polarities: Sequence[str] | None = None,
) -> Explanation:
    """Explain one (query, result) pair of unit embeddings by the finding's anchor sentences
    (``polarities``: each sentence's "positive" / "negative", carried into the terms)."""
    if anchors.shape[0] != len(sentences):
        raise ValueError(
            f"{anchors.shape[0]} anchor embeddings but {len(sentences)} sentences; "
            "re-embed the anchor set"
        )
    if polarities is not None and len(polarities) != len(sentences):
        raise ValueError(f"{len(polarities)} polarities for {len(sentences)} anchor sentences")
    log_p = anchor_profile(np.stack([query, result]), anchors, inv_temperature)
    p = np.exp(log_p)
    terms = 0.5 * (p[0] - p[1]) * (log_p[0] - log_p[1])
    shared_score = 0.5 * (log_p[0] + log_p[1])
    top = max(1, min(top, len(sentences)))

    def term(i: int) -> AnchorTerm:
        polarity = None if polarities is None else polarities[i]
        return AnchorTerm(sentences[i], float(p[0, i]), float(p[1, i]), float(terms[i]), polarity)

    shared = tuple(term(i) for i in np.argsort(-shared_score, kind="stable")[:top])
    differing = tuple(term(i) for i in np.argsort(-terms, kind="stable")[:top])
    return Explanation(shared=shared, differing=differing, divergence=float(terms.sum()))
