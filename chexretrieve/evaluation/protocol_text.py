"""The report's Protocol and Intervals paragraphs, written from the settings a run actually used.

Nothing here is fixed text about defaults: every sentence states the value in force (splits, label
rules, views and how many images they left out, the patient-overlap check and its outcome,
``min_queries``, the broad sets of the prior, the bootstrap unit), so a report read on its own says
exactly what was measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chexretrieve.evaluation.cohort import Cohort
from chexretrieve.evaluation.config import IntervalConfig, ProtocolConfig

_UNCERTAIN = {
    "drop": "dropped for that finding (the paper's rule)",
    "negative": "counted as negative (U-Zeros)",
    "positive": "counted as positive (U-Ones)",
}
_BLANK = {"negative": "counted as negative (CheXpert's convention)", "drop": "dropped"}


def _views_sentence(config: ProtocolConfig, cohort: Cohort | None) -> str:
    if cohort is None:
        return f"Views: `views={config.views}`."
    counts = ", ".join(f"{n} {view}" for view, n in sorted(cohort.view_counts.items()))
    if cohort.view_column is None:
        if config.views == "all":
            return "Views: all (`views=all`); the source records no view."
        return (
            f"Views: `views={config.views}` was asked for, but the source records no view, so "
            "every image of the two splits was used."
        )
    if config.views == "all":
        return (
            f"Views: all (`views=all`; from the `{cohort.view_column}` column: {counts} images "
            "in the two splits)."
        )
    why = ", as CheXzero evaluates" if config.views == "frontal" else ""
    return (
        f"Views: {config.views} images only (`views={config.views}`{why}; from the "
        f"`{cohort.view_column}` column: {counts} images in the two splits); "
        f"{cohort.excluded_by_view} images of other or unknown views were left out."
    )


def _patients_sentence(config: ProtocolConfig, cohort: Cohort | None) -> str:
    if cohort is None or cohort.patient_column is None:
        return (
            "Patients: the source records no patient ids, so the splits' patient overlap was "
            "not checked and every image counts as its own patient."
        )
    if not cohort.overlap:
        return (
            f"Patients (from `{cohort.patient_column}`): the query and key splits share no "
            "patient (checked)."
        )
    examples = ", ".join(cohort.overlap[:5]) + (", ..." if len(cohort.overlap) > 5 else "")
    return (
        f"Patients (from `{cohort.patient_column}`): {len(cohort.overlap)} patients have images "
        f"in both the query and the key split (e.g. {examples}); the run proceeded only because "
        "`--allow-patient-overlap` was given, so a query may retrieve its own patient's other "
        "images and these AUPRCs may be inflated."
    )


def _prior_sentence(broad_sets: Sequence[str] | None, posterior_used: bool) -> str:
    if not posterior_used:
        return "No posterior geometry was evaluated, so no broad prior was used."
    if not broad_sets:
        return "Prior of the posterior geometries: the broad anchor corpus (sets not recorded)."
    return (
        "Prior of the posterior geometries: the broad anchor sets "
        + ", ".join(f"`{s}`" for s in broad_sets)
        + " (their sentences pooled)."
    )


def _unlabelled_sentence(unlabelled: Mapping[str, int] | None) -> str:
    if unlabelled is None:
        return "Every image of the source has a labels row (the source lists images by them)."
    total = sum(unlabelled.values())
    if total == 0:
        return "Unlabelled images: none (every embedded image has a labels row)."
    by_split = ", ".join(
        f"{n} {split}" if split else f"{n} without a recorded split"
        for split, n in sorted(unlabelled.items())
    )
    return (
        f"Unlabelled images: {total} embedded images have no labels row ({by_split}) and were "
        "left out before anything else (neither queries nor keys)."
    )


#: how per-query AP treats ties, and where an independent implementation can differ
TIES_SENTENCE = (
    "AUPRC is the average precision of each query's ranked key list, averaged over queries; "
    "per query it equals scikit-learn's `average_precision_score` on the scores the geometry "
    "computes, ties included (keys with exactly equal scores are one threshold, tested against "
    "scikit-learn). Ties are exact equalities of those computed scores: keys whose scores are "
    "equal in exact arithmetic but differ in the last bits (float32 features, blocked matrix "
    "products) are ranked by their computed values, so an implementation computing the scores "
    "in another order can differ slightly at such near-ties."
)


def protocol_paragraph(
    config: ProtocolConfig,
    cohort: Cohort | None,
    broad_sets: Sequence[str] | None = None,
    posterior_used: bool = False,
    unlabelled: Mapping[str, int] | None = None,
) -> str:
    """The Protocol paragraph of a report from ``config`` and what the run found (``cohort``);
    ``unlabelled``: images the source left out for want of a labels row, by split."""
    return " ".join(
        [
            f"Queries: images of the `{config.query_split}` split labelled positive for the "
            "finding (an uncertain or blank label never makes a query). Keys: images of the "
            f"`{config.key_split}` split; an uncertain (-1) key label is "
            f"{_UNCERTAIN[config.uncertain_as]} (`uncertain_as={config.uncertain_as}`), a blank "
            f"one {_BLANK[config.blank_as]} (`blank_as={config.blank_as}`); a key is relevant "
            "when positive.",
            _unlabelled_sentence(unlabelled),
            _views_sentence(config, cohort),
            _patients_sentence(config, cohort),
            f"A finding with fewer than {config.min_queries} queries "
            f"(`min_queries={config.min_queries}`) or "
            + (
                "no relevant key"
                if config.min_relevant_keys == 1
                else f"fewer than {config.min_relevant_keys} relevant keys"
            )
            + " is skipped and listed under Skipped.",
            _prior_sentence(broad_sets, posterior_used),
            TIES_SENTENCE,
        ]
    )


def interval_paragraph(config: IntervalConfig, cohort: Cohort | None) -> str:
    """The Intervals paragraph: replicates, what is resampled (patients or images) and how."""
    by_patient = config.unit == "patient" and cohort is not None and cohort.patient_column
    if by_patient:
        unit = (
            "the patients with replacement (a cluster bootstrap: a drawn patient brings all of "
            f"its query images; patient ids from `{cohort.patient_column}`)"
        )
    elif config.unit == "patient":
        unit = "the query images with replacement (no patient ids: each image is its own patient)"
    else:
        unit = "the query images with replacement (`--bootstrap-unit image`)"
    shared = (
        "one draw shared by all cells, since the same images are every cell's queries"
        if config.query_resampling == "shared"
        else "an independent draw for every drawn cell (`query_resampling=per_cell`)"
    )
    return (
        "Each entry averages per-query AP (or paired per-query AP differences) over (anchor "
        f"variant x checkpoint) cells and query images. {config.confidence:.0%} intervals: "
        f"{config.n_bootstrap} bootstrap replicates (seed {config.seed}); each replicate draws "
        f"the cells with replacement and {unit}, {shared}, and takes the mean; percentile "
        "interval. A finding whose queries come from fewer than 2 patients gets no interval "
        "(shown as n/a, the reason under Interval notes). Average rows weight findings equally "
        "and share each replicate's cell draw across findings. Differences above +0.005 are "
        "bold, below -0.005 bold red (HTML, terminal), otherwise grey."
    )
