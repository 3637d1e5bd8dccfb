"""How a search result is shown: a table (and explanations) or PHI-minimal JSON.

``chexretrieve search`` (chexretrieve.app.commands) and the demo print through these.
"""

from __future__ import annotations


def print_result(result, explain: bool) -> None:
    """Print a SearchResult as a table (and its explanations)."""
    from rich.console import Console
    from rich.table import Table

    from chexretrieve.findings import label_word

    table = Table(
        title=f"{result.finding} · {result.geometry} · anchors {result.anchor_set} · "
        f"{result.candidates} candidates"
    )
    for column in ("rank", "case", "score", "view", "sex", "age", "date", f"{result.finding}"):
        table.add_column(column)
    for hit in result.hits:
        m = hit.metadata
        age = m.get("patient_age_years")
        label = hit.labels.get(result.finding)
        table.add_row(
            str(hit.rank),
            str(hit.image_id),
            f"{hit.score:.4f}",
            str(m.get("view_position") or ""),
            str(m.get("patient_sex") or ""),
            "" if age is None or age != age else f"{age:.0f}",  # None or NaN: unknown
            str(m.get("study_date") or ""),
            label_word(label),
        )
    Console().print(table)
    if result.prior:
        from chexretrieve.anchors.broad_prior import prior_line

        Console().print(f"prior: {prior_line(result.prior)}", markup=False, soft_wrap=True)
    from chexretrieve.density.output import density_lines

    for line in density_lines(result, explain):
        Console().print(line, markup=False)
    if explain:
        for hit in result.hits:
            Console().print(f"\n[bold]case {hit.image_id}[/bold]\n{hit.explanation.as_text()}")
            for line in density_lines(hit, explain):
                Console().print(line, markup=False)


#: metadata fields shown to users and in JSON output (no names or patient ids: PHI-minimal)
PUBLIC_FIELDS = ("view_position", "patient_sex", "patient_age_years", "study_date", "split")


def result_as_dict(result) -> dict:
    """A JSON-ready, PHI-minimal view of a SearchResult."""
    return {
        "finding": result.finding,
        "geometry": result.geometry,
        "anchor_set": result.anchor_set,
        "encoder_id": result.encoder_id,
        "candidates": result.candidates,
        "prior": [dict(d) for d in getattr(result, "prior", ())],
        "hits": [
            {
                "rank": h.rank,
                "case": h.image_id,
                "score": h.score,
                "metadata": {k: h.metadata.get(k) for k in PUBLIC_FIELDS},
                "labels": h.labels,
                **({"explanation": h.explanation.as_text()} if h.explanation is not None else {}),
                **({"concepts": [c.as_dict() for c in h.concepts]} if h.concepts else {}),
            }
            for h in result.hits
        ],
        **({"density": result.density.as_dict()} if result.density is not None else {}),
    }
