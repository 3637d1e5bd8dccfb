"""Plain-text lines about a search's density assessment (CLI table output; the UI has its own)."""

from __future__ import annotations


def concept_text(share) -> str:
    """'42 % component 3 (Cardiomegaly; nearest anchor: ...)' for one ConceptShare."""
    return f"{100 * share.posterior:.0f} % {share.name.text()}"


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
        lines.append("concepts: " + "; ".join(concept_text(c) for c in concepts))
    return lines
