"""Plain-text lines about a search's density assessment (CLI table output; the UI has its own)."""

from __future__ import annotations

#: an image's top component is shown alone when it holds at least this share of its posterior
#: (the phantom evaluation: the posterior is a hard assignment, about 90 % of images put > 0.99
#: on one component, so a list of "concepts" with shares would suggest a decomposition that is
#: not there; eval/reports/density-phantom)
CLEAR_ASSIGNMENT = 0.9


def cluster_text(concepts) -> str:
    """An image's archive cluster: its top component, named ('component 3 (Cardiomegaly;
    nearest anchor: ...)'); the runner-up and both shares only when the top one holds less than
    ``CLEAR_ASSIGNMENT`` of the posterior."""
    if not concepts:
        return ""
    top = concepts[0]
    text = top.name.text()
    if top.posterior < CLEAR_ASSIGNMENT and len(concepts) > 1:
        second = concepts[1]
        text += (
            f", {100 * top.posterior:.0f} %; or {second.name.text()}, "
            f"{100 * second.posterior:.0f} %"
        )
    return text


def density_lines(item, explain: bool) -> list[str]:
    """Lines for a SearchResult (its density) or, with ``explain``, a SearchHit (its concepts)."""
    lines = []
    density = getattr(item, "density", None)
    if density is not None:
        if not hasattr(density, "log_density"):  # DensityUnavailable
            return [f"density: {density.note}"]
        flag = f"OUT OF DISTRIBUTION: {density.message}" if density.ood else "in distribution"
        lines.append(
            f"density: log p = {density.log_density:.2f}, archive percentile "
            f"{density.percentile:.1f} (threshold {density.threshold:.2f} = "
            f"{density.ood_percentile:g}th percentile): {flag}"
        )
        if density.note:
            lines.append(f"density note: {density.note}")
    concepts = density.concepts if density is not None else getattr(item, "concepts", ())
    if explain and concepts:
        lines.append("archive cluster: " + cluster_text(concepts))
    return lines
