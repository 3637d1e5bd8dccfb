"""The case picker's "rare cases first" order (no Gradio): archived cases by archive density.

The rarest case is the one with the lowest log-density under the archive's vMF mixture
(``chexretrieve.density``); teaching-file lookup pages through them in that order. The id /
accession prefix still narrows the list; the finding's label is shown, not filtered on.
"""

from __future__ import annotations

import numpy as np

#: the picker status that orders the list by rarity instead of filtering by label
RARE_FIRST = "rare cases first"


def rare_case_rows(service, gallery, text: str, finding: str | None, offset: int, limit: int):
    """(total, [(image id, metadata, label)], note) for one page, rarest first.

    ValueError with the density's note when the archive has no usable density."""
    if service.density is None:
        raise ValueError("rare cases first needs the archive density (DensityConfig.enabled)")
    density, _, note = service.density.usable(gallery)
    if density is None:
        raise ValueError(note)
    order = np.asarray(density.rarity_order(), dtype=np.int64)
    ordered = order[np.isin(order, np.asarray(gallery.image_ids, dtype=np.int64))].tolist()
    if text:
        accession = "accession_number" if gallery.has_column("accession_number") else None
        prefix = text.upper()

        def matches(image_id: int) -> bool:
            if text.isdigit() and str(image_id).startswith(text):
                return True
            if accession is None:
                return False
            value = gallery.value(accession, gallery.row_of(image_id))
            return isinstance(value, str) and value.upper().startswith(prefix)

        ordered = [i for i in ordered if matches(i)]
    rows = []
    for image_id in ordered[offset : offset + limit]:
        meta = gallery.metadata_of(image_id)
        label = gallery.labels_of(image_id).get(finding) if finding else None
        rows.append((image_id, meta, None if label is None or label != label else label))
    return len(ordered), rows, note
