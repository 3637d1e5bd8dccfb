"""The line above the results that says how typical the query is of the archive (escaped HTML).

An out-of-distribution query (``QueryDensity.ood``: its log-density below the archive's low
percentile) gets a warning box with the plain sentence of ``chexretrieve.density.OOD_MESSAGE``;
any other query a quiet status line with its archive percentile and its main concepts. A stale fit
or a missing density is said, never hidden.
"""

from __future__ import annotations

from html import escape as esc

#: concepts named in the line (the decomposition itself may hold more)
SHOWN_CONCEPTS = 2


def _concepts(density) -> str:
    parts = []
    for share in density.concepts[:SHOWN_CONCEPTS]:
        labels = " and ".join(share.name.labels) or "no one finding"
        parts.append(f"cases mostly labelled {labels} ({100 * share.posterior:.0f} %)")
    return "; ".join(parts)


def _share(density) -> str:
    """'18 % of archived images are less typical of the archive than this query' in words."""
    return (
        f"{density.percentile:.1f} % of archived images are less typical of the archive than "
        f"this query; a query is flagged as unlike the archive below "
        f"{density.ood_percentile:g} %"
    )


def density_banner_html(density) -> str:
    """HTML for a SearchResult's ``density`` (QueryDensity / DensityUnavailable / None), in plain
    words; the model's figures (log-density, component numbers) only in the hover text."""
    if density is None:
        return ""
    if not hasattr(density, "log_density"):
        return f"<div class='cx-message cx-message-info' role='status'>{esc(density.note)}</div>"
    stale = f" Note: {density.note}" if density.note else ""
    technical = esc(
        f"archive density (von Mises-Fisher mixture, {density.n_components} components): "
        f"log-density {density.log_density:.1f}, archive percentile {density.percentile:.1f}, "
        f"flag threshold {density.threshold:.1f} ({density.ood_percentile:g}th percentile)"
    )
    if density.ood:
        text = f"Warning: {density.message}. {_share(density)}.{stale}"
        return (
            "<div class='cx-message cx-message-error' role='alert' id='density-flag' "
            f"title='{technical}'>{esc(text)}</div>"
        )
    concepts = _concepts(density)
    text = f"How typical of this archive: {_share(density)}, and this one is not." + (
        f" It looks most like archived {concepts}." if concepts else ""
    )
    return (
        "<div class='cx-message cx-message-info' role='status' id='density-flag' "
        f"title='{technical}'>{esc(text + stale)}</div>"
    )


def result_concepts_html(service, image_id: int) -> str:
    """A result's concept decomposition (its top components covering 90 % of its posterior,
    each named by its dominant labels and nearest anchor sentence); empty without a density."""
    provider = getattr(service, "density", None)
    density = provider.held() if provider is not None else None
    gallery = service.gallery if density is not None else None
    if density is None or int(image_id) not in gallery:
        return ""
    row = gallery.embedding_rows([gallery.row_of(int(image_id))])
    shares = provider.concepts(density, row)[0]
    items = "".join(f"<li>{100 * s.posterior:.0f} % · {esc(s.name.text())}</li>" for s in shares)
    return f"<p class='cx-sub'>Concepts (archive density)</p><ul class='cx-concepts'>{items}</ul>"
