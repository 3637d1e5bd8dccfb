"""The line above the results that says how typical the query is of the archive (escaped HTML).

An out-of-distribution query (``QueryDensity.ood``: its log-density below the archive's low
percentile) gets a warning box with the plain sentence of ``chexretrieve.density.OOD_MESSAGE``;
any other query a quiet status line with its archive percentile and its archive cluster (the top
component of the mixture, by its dominant labels). A stale fit or a missing density is said, never
hidden.
"""

from __future__ import annotations

from html import escape as esc


def _cluster(density) -> str:
    """The query's archive cluster by its dominant labels (the mixture's posterior is a hard
    assignment on the phantom evaluation, so no list of "concepts" with shares is shown)."""
    if not density.concepts:
        return ""
    return ", ".join(density.concepts[0].name.labels) or "no one finding"


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
    model = {"gaussian": "a Gaussian", "movmf": "the von Mises-Fisher mixture"}.get(
        getattr(density, "ood_model", ""), "the archive density"
    )
    technical = esc(
        f"typicality under {model} of the archive ({density.n_components}-component mixture "
        f"for the clusters): log-density {density.log_density:.1f}, archive percentile "
        f"{density.percentile:.1f}, "
        f"flag threshold {density.threshold:.1f} ({density.ood_percentile:g}th percentile)"
    )
    if density.ood:
        text = f"Warning: {density.message}. {_share(density)}.{stale}"
        return (
            "<div class='cx-message cx-message-error' role='alert' id='density-flag' "
            f"title='{technical}'>{esc(text)}</div>"
        )
    cluster = _cluster(density)
    text = f"How typical of this archive: {_share(density)}, and this one is not." + (
        f" It falls in the archive's cluster of cases mostly labelled {cluster}." if cluster else ""
    )
    return (
        "<div class='cx-message cx-message-info' role='status' id='density-flag' "
        f"title='{technical}'>{esc(text + stale)}</div>"
    )


def result_concepts_html(service, image_id: int) -> str:
    """A result's archive cluster (its top mixture component, named by its dominant labels and
    the nearest anchor sentence agreeing with them; the runner-up only for an unclear
    assignment, ``chexretrieve.density.output.cluster_text``); empty without a density."""
    from chexretrieve.density.output import cluster_text

    provider = getattr(service, "density", None)
    density = provider.held() if provider is not None else None
    gallery = service.gallery if density is not None else None
    if density is None or int(image_id) not in gallery:
        return ""
    row = gallery.embedding_rows([gallery.row_of(int(image_id))])
    shares = provider.concepts(density, row)[0]
    if not shares:
        return ""
    return (
        "<p class='cx-sub'>Archive cluster (archive density)</p>"
        f"<p class='cx-concepts'>{esc(cluster_text(shares))}</p>"
    )
