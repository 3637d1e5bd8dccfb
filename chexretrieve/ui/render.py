"""Turning search objects into what the browser shows: escaped text, HTML tables, thumbnails.

Every string that comes from a DICOM file, an anchor file or the store passes :func:`esc` before it
reaches an HTML or Markdown component, so markup in a header field shows as text and never runs.
No Gradio here: these are plain functions the handlers call and the tests check directly.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Iterable, Sequence

import numpy as np

from chexretrieve.findings import LABEL_WORDS, NOT_MENTIONED
from chexretrieve.findings import label_word as finding_label_word

__all__ = ["LABEL_WORDS", "NOT_MENTIONED"]  # re-exported: the words shown to users

#: metadata shown for archived cases and uploads (no names, ids, UIDs or file paths: PHI-minimal)
DETAIL_FIELDS = (
    ("view_position", "View"),
    ("patient_sex", "Sex"),
    ("patient_age_years", "Age"),
    ("study_date", "Study date"),
    ("modality", "Modality"),
    ("body_part", "Body part"),
    ("manufacturer", "Manufacturer"),
    ("photometric", "Photometric"),
    ("size", "Pixels"),
    ("source_format", "Format"),
    ("split", "Split"),
)


#: control characters (below space, tab kept) shown as a space
_CONTROL_AS_SPACE = {code: " " for code in range(32) if code != 9}


def esc(value: object) -> str:
    """Text safe inside HTML and Markdown: &, <, >, quotes and | escaped; control chars dropped."""
    text = "" if value is None else str(value)
    text = text.translate(_CONTROL_AS_SPACE)
    return html.escape(text, quote=True).replace("|", "&#124;").replace("`", "&#96;")


def is_missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    try:
        import pandas as pd

        return bool(pd.isna(value)) if np.ndim(value) == 0 else False
    except (TypeError, ValueError):
        return False


def format_age(value: object) -> str:
    if is_missing(value):
        return "—"
    try:
        return f"{float(value):.0f}"
    except (TypeError, ValueError):
        return "—"


def format_date(value: object) -> str:
    if is_missing(value):
        return "—"
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)[:10]


def format_text(value: object) -> str:
    return "—" if is_missing(value) or str(value).strip() == "" else str(value).strip()


def label_word(value: object) -> str:
    """positive / negative / uncertain / not mentioned (one word set for every screen)."""
    if is_missing(value):
        return NOT_MENTIONED
    return finding_label_word(value)


def format_score(score: float) -> str:
    if not math.isfinite(score):
        return str(score)
    return f"{score:.4f}" if abs(score) >= 1e-3 or score == 0 else f"{score:.2e}"


def detail_value(key: str, meta: dict) -> str:
    """One PHI-minimal detail as display text (unescaped)."""
    if key == "patient_age_years":
        age = format_age(meta.get(key))
        return age if age == "—" else f"{age} years"
    if key == "study_date":
        return format_date(meta.get(key))
    if key == "size":
        rows, cols = meta.get("pixel_rows"), meta.get("pixel_columns")
        if is_missing(rows) or is_missing(cols):
            return "—"
        return f"{int(cols)} × {int(rows)}"
    return format_text(meta.get(key))


def details_html(title: str, meta: dict, notes: Sequence[str] = ()) -> str:
    """A compact key-value table of the PHI-minimal details, every value escaped."""
    rows = "".join(
        f"<tr><th>{name}</th><td>{esc(detail_value(key, meta))}</td></tr>"
        for key, name in DETAIL_FIELDS
    )
    extra = "".join(f"<p class='cx-note'>{esc(note)}</p>" for note in notes)
    return (
        f"<div class='cx-details'><div class='cx-details-title'>{esc(title)}</div>"
        f"<table>{rows}</table>{extra}</div>"
    )


def _chip(word: str) -> str:
    return f"<span class='cx-label cx-{word.replace(' ', '-')}'>{word}</span>"


def hits_table_html(
    hits: Iterable,
    finding: str,
    relevant: Iterable[int] = (),
    not_relevant: Iterable[int] = (),
) -> str:
    """Results as an HTML table (rank with feedback mark, case, score, view, sex, age, date,
    label of the finding)."""
    relevant, not_relevant = set(relevant), set(not_relevant)
    rows = []
    for hit in hits:
        m = hit.metadata
        mark = " ✓" if hit.image_id in relevant else ""
        mark = " ✗" if hit.image_id in not_relevant else mark
        rows.append(
            "<tr>"
            f"<td>{hit.rank}{mark}</td><td>{hit.image_id}</td>"
            f"<td class='cx-num'>{esc(format_score(hit.score))}</td>"
            f"<td>{esc(format_text(m.get('view_position')))}</td>"
            f"<td>{esc(format_text(m.get('patient_sex')))}</td>"
            f"<td>{esc(format_age(m.get('patient_age_years')))}</td>"
            f"<td>{esc(format_date(m.get('study_date')))}</td>"
            f"<td>{_chip(label_word(hit.labels.get(finding)))}</td>"
            "</tr>"
        )
    if not rows:
        return "<p class='cx-empty'>No case passes the filters.</p>"
    head = "".join(
        f"<th>{esc(h)}</th>" for h in ("#", "case", "score", "view", "sex", "age", "date", finding)
    )
    return (
        f"<table class='cx-hits'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def hit_caption(hit, relevant: Iterable[int] = (), not_relevant: Iterable[int] = ()) -> str:
    """A short plain-text caption for a gallery thumbnail (numbers and our own words only)."""
    mark = " ✓" if hit.image_id in set(relevant) else ""
    mark = " ✗" if hit.image_id in set(not_relevant) else mark
    return f"#{hit.rank} · case {hit.image_id}{mark}"


def _weight_cell(value: float) -> str:
    return f"<td class='cx-num'>{value:.3f}</td>"


def _quoted(sentence: str, limit: int = 90) -> str:
    text = " ".join(str(sentence).split())
    return f"‘{text if len(text) <= limit else text[: limit - 1] + '…'}’"


#: how the plain-language line names an anchor's polarity (what the sentence says of the finding)
_POLARITY_WORDS = {"positive": "finding present", "negative": "finding absent"}


def _anchor_phrase(term) -> str:
    """An anchor sentence quoted, with what it says of the finding when its polarity is known."""
    quoted = _quoted(term.sentence)
    words = _POLARITY_WORDS.get(term.polarity or "")
    return f"{quoted} ({words})" if words else quoted


def _polarity_cell(term) -> str:
    if term.polarity not in _POLARITY_WORDS:
        return "<td></td>"
    words = esc(_POLARITY_WORDS[term.polarity])
    return f"<td><span class='cx-label cx-{term.polarity}'>{words}</span></td>"


def plain_explanation(explanation, query_name: str = "the query") -> str:
    """One or two plain sentences from the anchor terms (unescaped): what both images weigh most
    and, when the divergence is not negligible, the sentence that sets them apart most."""
    shared = list(explanation.shared[:2])
    if not shared:
        return "The anchor set has no sentences to explain this result with."
    both = " and ".join(_anchor_phrase(t) for t in shared)
    first = shared[0]
    line = (
        f"Both images weigh {both} most (first: {first.query_weight:.2f} for {query_name}, "
        f"{first.result_weight:.2f} for the result)."
    )
    apart = explanation.differing[0] if explanation.differing else None
    if apart is not None and apart.divergence_term > 0.05 * max(explanation.divergence, 1e-12):
        who = query_name if apart.query_weight > apart.result_weight else "the result"
        line += (
            f" They differ most on {_anchor_phrase(apart)}, which {who} weighs more "
            f"({apart.query_weight:.2f} vs {apart.result_weight:.2f})."
        )
    return line


def explanation_html(
    explanation, query_name: str, image_id: int, finding: str, key: str, side: str | None = None
) -> str:
    """The anchor explanation of one result as escaped HTML: a plain-language line, then the
    anchor sentences both weigh most and those that set them apart (two small tables), in the
    terms of the geometry that ranked them, with a note when they are an approximation."""
    shared = "".join(
        f"<tr><td class='cx-text'>{esc(t.sentence)}</td>{_polarity_cell(t)}"
        f"{_weight_cell(t.query_weight)}{_weight_cell(t.result_weight)}</tr>"
        for t in explanation.shared
    )
    differing = "".join(
        f"<tr><td class='cx-text'>{esc(t.sentence)}</td>{_polarity_cell(t)}"
        f"{_weight_cell(t.query_weight)}{_weight_cell(t.result_weight)}"
        f"<td class='cx-num'>{t.divergence_term:.4f}</td></tr>"
        for t in explanation.differing
    )
    return (
        "<div class='cx-explanation'>"
        f"<div class='cx-details-title'>Why case {int(image_id)} is close to {esc(query_name)}"
        f"</div><p class='cx-plain'>{esc(plain_explanation(explanation, query_name))}</p>"
        f"<p class='cx-note'>{esc(finding)} · anchors {esc(key)} · {esc(_terms_note(explanation))}"
        "</p>"
        + "".join(f"<p class='cx-note'>{esc(n)}</p>" for n in _caveats(explanation, finding, side))
        + "<p class='cx-sub'>Anchor sentences both images weight most</p>"
        "<table class='cx-hits'><thead><tr><th>anchor sentence</th><th>says</th><th>query</th>"
        f"<th>result</th></tr></thead><tbody>{shared}</tbody></table>"
        f"<p class='cx-sub'>Anchors that set them apart (how differently the two images weigh "
        f"them; {explanation.divergence:.4f} in total)</p>"
        "<table class='cx-hits'><thead><tr><th>anchor sentence</th><th>says</th><th>query</th>"
        f"<th>result</th><th>difference</th></tr></thead><tbody>{differing}</tbody></table></div>"
    )


def _terms_note(explanation) -> str:
    if getattr(explanation, "method", "softmax") == "gaussian":
        return (
            "Gaussian geometry: the distance between the two images is the sum over the anchor "
            "sentences of how differently they lie along each sentence's offset from the set's "
            "mean (a Mahalanobis distance); an image's weight is its projection on that offset"
        )
    return (
        "an image's weight on an anchor sentence is its share of the image's softmax profile "
        "over the set (weights of one image add up to 1)"
    )


def _caveats(explanation, finding: str, side: str | None) -> list[str]:
    notes = []
    if getattr(explanation, "approximate", False):
        notes.append(
            "Approximate: the ranking geometry's score does not split sentence by sentence, so "
            "the pair is explained by the anchor set's "
            + ("Gaussian terms without the broad prior's share." if explanation.method ==
               "gaussian" else "softmax profile.")
        )  # fmt: skip
    other = getattr(explanation, "left_out_side", None)
    if other and side:
        notes.append(
            f"Sentences that name only the {other} side are left out: the query's report puts "
            f"the {finding} on the {side}."
        )
    return notes


def thumbnail(display: np.ndarray, max_side: int) -> np.ndarray:
    """Downscale an 8-bit greyscale image so its longer side is at most ``max_side`` pixels."""
    from PIL import Image

    rows, cols = display.shape
    scale = max_side / max(rows, cols)
    if scale >= 1:
        return display
    size = (max(1, round(cols * scale)), max(1, round(rows * scale)))
    return np.asarray(Image.fromarray(display).resize(size, Image.Resampling.LANCZOS))


def placeholder(max_side: int) -> np.ndarray:
    """A mid-grey square with a darker cross: shown when an archived file cannot be read."""
    image = np.full((max_side, max_side), 96, dtype=np.uint8)
    idx = np.arange(max_side)
    image[idx, idx] = 48
    image[idx, max_side - 1 - idx] = 48
    return image


def message_html(text: str | None, kind: str = "error") -> str:
    """A message above the results (escaped): ``error`` (what to change), ``info`` or empty."""
    if not text:
        return ""
    role = "alert" if kind == "error" else "status"
    return f"<div class='cx-message cx-message-{kind}' role='{role}'>{esc(text)}</div>"
