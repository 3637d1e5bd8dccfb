"""Rare cases first: archive images ordered by their log-density under the archive's mixture."""

from __future__ import annotations

import numpy as np

from chexretrieve.findings import FINDINGS


def rare_cases(provider, gallery, top: int) -> tuple[list[dict], str]:
    """(rows for the ``top`` rarest images of ``gallery``, a note about the fit used).

    Only images of today's gallery are listed; with a stale fit, images added since it have no
    score yet and are left out (the note says so)."""
    density, stale, note = provider.usable(gallery)
    if density is None:
        raise ValueError(note)
    percentile = dict(zip(density.image_ids.tolist(), density.rarity_percentile(), strict=True))
    scores = dict(zip(density.image_ids.tolist(), density.log_density, strict=True))
    present = [int(i) for i in density.rarity_order() if int(i) in gallery]
    picked = present[:top]
    embeddings = gallery.embeddings[[gallery.row_of(i) for i in picked]] if picked else None
    concepts = provider.concepts(density, embeddings) if picked else []
    rows = []
    for rank, (image_id, shares) in enumerate(zip(picked, concepts, strict=True), start=1):
        row = gallery.row_of(image_id)
        labels = gallery.labels.iloc[row]
        positive = [f for f in FINDINGS if f in labels.index and labels[f] == 1.0]
        view = gallery.metadata.iloc[row].get("view_position")
        rows.append(
            {
                "rank": rank,
                "case": image_id,
                "log_density": float(scores[image_id]),
                "rarity_percentile": float(percentile[image_id]),
                "view_position": None if view is None or view != view else view,
                "positive_labels": positive,
                "concept": shares[0].name.text() if shares else "",
            }
        )
    if stale:
        missing = int(np.setdiff1d(gallery.image_ids, density.image_ids).size)
        note = f"{note}; {missing} images added since the fit are not ranked"
    return rows, note
