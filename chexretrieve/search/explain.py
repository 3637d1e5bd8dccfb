"""Why two images are close for a finding: the anchor sentences behind their divergence.

Each image induces a softmax profile over the finding's anchor sentences,
P(i | λ) = softmax_i(inv_t · λᵀγ_i). The symmetrised KL divergence of two profiles splits exactly
into one non-negative term per anchor, ½ (P_q(i) − P_k(i)) (log P_q(i) − log P_k(i)); the
anchors with the largest terms are what sets the two images apart. The anchors both profiles
weight most (largest √(P_q P_k)) are what the two images share. The explanation uses the
finding's anchor set whatever geometry ranked the results, so it speaks in the anchors' words.
"""

from __future__ import annotations

import dataclasses
import re
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
    # the geometry's own terms: "softmax" (each image's softmax weights over the anchors) or
    # "gaussian" (each anchor's share of the Mahalanobis distance; weights are the images'
    # projections on the anchor's offset from the anchors' mean)
    method: str = "softmax"
    # True when the terms are not the ranking geometry's own (its score does not split by
    # anchor sentence): the pair is then explained by the softmax profile, an approximation
    approximate: bool = False
    # sentences left out because they name the other side than the query's finding
    left_out_side: str | None = None

    def as_text(self) -> str:
        def said(t: AnchorTerm) -> str:  # what the sentence says of the finding, when known
            return {"positive": " [present]", "negative": " [absent]"}.get(t.polarity or "", "")

        lines = ["Shared by query and result (anchor weights query / result):"]
        lines += [
            f"  • {t.sentence}{said(t)}  ({t.query_weight:.2f} / {t.result_weight:.2f})"
            for t in self.shared
        ]
        lines.append(f"Setting them apart (total difference {self.divergence:.3f}):")
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


def explain_gaussian_pair(
    query: np.ndarray,
    result: np.ndarray,
    anchors: np.ndarray,
    sentences: Sequence[str],
    inv_temperature: float,
    top: int = 5,
    polarities: Sequence[str] | None = None,
) -> Explanation:
    """The Gaussian geometry's own explanation. Its divergence is the Mahalanobis-type form
    (inv_t²/2) (q − r)ᵀ Σ (q − r) with Σ = (1/N) Σ_i (γ_i − μ)(γ_i − μ)ᵀ, so it splits exactly
    into one term per anchor sentence: (inv_t² / 2N) ((γ_i − μ)·(q − r))². An image's weight on a
    sentence is its projection (γ_i − μ)·x; the sentences both images project on most, in the
    same direction (largest product), are what they share."""
    anchors = np.asarray(anchors, dtype=np.float64)
    if anchors.shape[0] != len(sentences):
        raise ValueError(
            f"{anchors.shape[0]} anchor embeddings but {len(sentences)} sentences; "
            "re-embed the anchor set"
        )
    if polarities is not None and len(polarities) != len(sentences):
        raise ValueError(f"{len(polarities)} polarities for {len(sentences)} anchor sentences")
    offsets = anchors - anchors.mean(axis=0)
    pq = offsets @ np.asarray(query, dtype=np.float64)
    pr = offsets @ np.asarray(result, dtype=np.float64)
    terms = inv_temperature**2 / (2.0 * len(sentences)) * (pq - pr) ** 2
    top = max(1, min(top, len(sentences)))

    def term(i: int) -> AnchorTerm:
        polarity = None if polarities is None else polarities[i]
        return AnchorTerm(sentences[i], float(pq[i]), float(pr[i]), float(terms[i]), polarity)

    shared = tuple(term(i) for i in np.argsort(-(pq * pr), kind="stable")[:top])
    differing = tuple(term(i) for i in np.argsort(-terms, kind="stable")[:top])
    return Explanation(shared, differing, float(terms.sum()), method="gaussian")


_LEFT = re.compile(r"\bleft\b", re.IGNORECASE)
_RIGHT = re.compile(r"\bright\b", re.IGNORECASE)
_BOTH = re.compile(r"\bbilateral|\bboth\b", re.IGNORECASE)


def sentence_side(text: str) -> str | None:
    """The side a sentence names: "left", "right", "bilateral" (both), or None."""
    if _BOTH.search(text):
        return "bilateral"
    left, right = bool(_LEFT.search(text)), bool(_RIGHT.search(text))
    if left and right:
        return "bilateral"
    return "left" if left else "right" if right else None


def without_other_side(explanation: Explanation, side: str | None, top: int) -> Explanation:
    """The explanation without the sentences that name only the side opposite to ``side`` (the
    query's finding side); ``explanation`` should hold more than ``top`` terms per list."""
    if side not in ("left", "right"):
        return dataclasses.replace(
            explanation, shared=explanation.shared[:top], differing=explanation.differing[:top]
        )
    other = "right" if side == "left" else "left"

    def keep(terms):
        return tuple(t for t in terms if sentence_side(t.sentence) != other)[:top]

    return dataclasses.replace(
        explanation,
        shared=keep(explanation.shared),
        differing=keep(explanation.differing),
        left_out_side=other,
    )


def report_side(report: str | None, finding: str) -> str | None:
    """ "left" or "right" when the report's sentences about the finding name that side only."""
    from chexretrieve.anchors.topics import mentions_finding

    if not report:
        return None
    sides = {
        sentence_side(sentence)
        for sentence in report.replace("?", ".").split(".")
        if sentence.strip() and mentions_finding(sentence, finding)
    } - {None}
    return next(iter(sides)) if len(sides) == 1 and sides <= {"left", "right"} else None
