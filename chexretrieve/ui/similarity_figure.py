"""The number beside each result, and the legend that says what it means (issue 34).

A radiologist reads the number as a chance, so it must be one whose meaning does not depend on
who asks:

* an archived query positive for the finding: the chance that a result at that rank is positive
  too, measured on archived positive queries (read against the share of archived cases that are
  positive);
* an archived query negative for it (label 0 or not mentioned): the chance that a result at that
  rank is negative too, measured on archived negative queries (read against the negative share);
* a query whose status nobody knows (an upload; an archived case labelled uncertain or not
  labelled at all): the chance that a result at that rank is positive, over archived queries of
  either status; it claims nothing about the query;
* a query unlike the archive (the archive density flags it, or its nearest archived image is
  farther than almost every archived image's): no chance at all, greyed, with the reason; chances
  measured on archived cases do not transfer to a leg film or a noise image.

The curves are :mod:`chexretrieve.search.calibration`'s; this module only picks one and words it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from chexretrieve.ui.render import is_missing

POSITIVE, NEGATIVE, UNKNOWN = "positive", "negative", "unknown"


def query_status(labels: Mapping[str, object] | None, finding: str) -> tuple[str, str]:
    """(the query's status for ``finding``, why it is unknown when it is): positive for label 1,
    negative for 0 or not mentioned (as the evaluation counts it), unknown for an upload (no
    labels), an archived case without any label, or an uncertain (-1) label."""
    if labels is None:
        return UNKNOWN, "an upload has no label"
    if all(is_missing(v) for v in labels.values()):
        return UNKNOWN, "this archived case has no labels"
    value = labels.get(finding)
    if is_missing(value):
        return NEGATIVE, ""
    number = float(value)  # type: ignore[arg-type]
    if number == 1:
        return POSITIVE, ""
    if number == -1:
        return UNKNOWN, f"its {finding} label is uncertain"
    return NEGATIVE, ""


def unlike_reason(density, nearest: float, nearest_low: float) -> str:
    """Why the query is out of distribution ("" when it is not). An archive density
    (chexretrieve.density.QueryDensity) decides when there is one (its banner speaks above the
    results, and the two never disagree on screen); otherwise the nearest-neighbour rule: the
    query's closest archived image is farther than 99 % of archived images' closest neighbour."""
    if hasattr(density, "log_density"):
        if not density.ood:
            return ""
        return (
            f"fewer than {density.ood_percentile:g} % of archived images are as atypical of the "
            "archive as it is"
        )
    if math.isfinite(nearest) and math.isfinite(nearest_low) and nearest < nearest_low:
        return (
            f"its closest archived image has cosine {nearest:.2f}, lower than 99 % of archived "
            f"images' closest neighbour ({nearest_low:.2f})"
        )
    return ""


@dataclass(frozen=True)
class ChanceFigure:
    """What the number beside each result is, for one results page."""

    # the finding the chance is about
    finding: str
    # the query's status: positive / negative / unknown
    query_status: str
    # why the query's status is unknown (an upload, an uncertain label); "" otherwise
    unknown_because: str
    # the measured curve (chexretrieve.search.calibration.StatusCurve); None: not measurable on
    # this archive (too few labelled cases), and the percentile is shown instead
    curve: object | None
    # labelled archived cases (the denominator of the base rate)
    n_labelled: int = 0
    # why no chance is shown although one was measured: the query is unlike the archive
    withheld: str = ""

    @property
    def status(self) -> str:
        """What each number is the chance of: the result being positive, or negative."""
        return NEGATIVE if self.query_status == NEGATIVE else POSITIVE

    @property
    def shown(self) -> bool:
        return self.curve is not None and not self.withheld

    def at(self, rank: int) -> float | None:
        return self.curve.at(rank) if self.shown else None  # type: ignore[union-attr]

    @property
    def heading(self) -> str:
        if self.withheld:
            return "chance (not shown)"
        return f"chance {self.status}"

    def cell(self, rank: int) -> str:
        """The text beside the result at ``rank`` ('—' when none is shown)."""
        value = self.at(rank)
        return "—" if value is None else f"{100 * value:.0f} % {self.status}"

    def title(self, rank: int) -> str:
        """The hover text of that number: what it is, in one sentence."""
        if self.withheld:
            return f"No chance shown: the query is unlike the archive ({self.withheld})"
        value = self.at(rank)
        if value is None:
            return "not measured at this rank"
        whose = {
            POSITIVE: "positive archived queries",
            NEGATIVE: "negative archived queries",
        }.get(self.query_status, "archived queries of either status")
        return (
            f"for {whose} searched the same way, {100 * value:.0f} % of the results at rank "
            f"{rank} were {self.status}; about the rank, not this case (its own label is on its "
            "chip)"
        )


def chance_legend(figure: ChanceFigure, geometry_display: str, candidates: int) -> str:
    """The legend under the title, in plain words (plain text; the page escapes it)."""
    finding = figure.finding
    hover = f"Hover a number for the case's percentile among the {candidates:,} candidates."
    if figure.withheld:
        return (
            "No chances are shown: the query is unlike the archive "
            f"({figure.withheld}). Chances measured on archived chest radiographs do not hold "
            "for it; the results are still ranked, most similar first. " + hover
        )
    curve = figure.curve
    base = f"{100 * curve.base_rate:.0f} %"  # type: ignore[union-attr]
    n = curve.n_queries  # type: ignore[union-attr]
    if figure.query_status == POSITIVE:
        return (
            f"Chance positive: when {n} archived cases positive for {finding} were searched the "
            f"same way ({geometry_display}), this share of the results at each rank were "
            f"positive too. For comparison, {base} of the {figure.n_labelled:,} labelled "
            "archived cases are positive. It is about the rank, not the case: a case's own "
            "label is on its chip. " + hover
        )
    if figure.query_status == NEGATIVE:
        return (
            f"Chance negative: when {n} archived cases negative for {finding} (or not "
            f"mentioning it) were searched the same way ({geometry_display}), this share of the "
            f"results at each rank were negative too. For comparison, {base} of the "
            f"{figure.n_labelled:,} labelled archived cases are negative. It is about the rank, "
            "not the case: a case's own label is on its chip. " + hover
        )
    return (
        f"Chance positive: when {n} labelled archived cases were searched the same way "
        f"({geometry_display}), this share of the results at each rank were positive for "
        f"{finding}. It says nothing about the query itself ({figure.unknown_because}). For "
        f"comparison, {base} of the {figure.n_labelled:,} labelled archived cases are positive. "
        + hover
    )


def make_figure(calibration, finding: str, labels, unlike: str) -> ChanceFigure | None:
    """The figure for a query with ``labels`` (None: an upload). None, and the page shows
    percentiles, when the archive cannot measure this query's chance (too few labelled cases)
    and the query is like the archive; a query unlike it always gets a withheld figure, so no
    number that reads as near-certainty (a chance, or a 99.9 percentile) stands beside a leg
    film."""
    status, because = query_status(labels, finding)
    key = {POSITIVE: 1.0, NEGATIVE: 0.0}.get(status)
    curve = None if calibration is None else calibration.curve_for(key)
    if curve is None and not unlike:
        return None
    n_labelled = 0 if calibration is None else calibration.n_labelled
    return ChanceFigure(finding, status, because, curve, n_labelled, unlike)
