"""The case picker (no Gradio): find an archived case by its exact case id or accession number
(never by a prefix: that would reveal accession numbers one character at a time), filter them
by one finding's label status, page through all of them, and read a typed case id strictly.

Labels shown per case are PHI-minimal: case id, view, sex, age, study date and the finding's label.
An accession number is an identifier: it can be typed to find a case but is never shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from chexretrieve.findings import NOT_MENTIONED
from chexretrieve.ui.input_limits import MAX_CASE_ID, MAX_ID_DIGITS, capped
from chexretrieve.ui.render import format_age, format_date, format_text, label_word

#: label statuses offered by the picker's filter ("any" = no filter), as Store.find_cases names them
STATUS_CHOICES = ("any", "positive", "negative", "uncertain", "blank", "unlabelled")
#: and the order "rare cases first" (chexretrieve.ui.rare_cases), offered in the same dropdown
PICKER_CHOICES = (*STATUS_CHOICES, "rare cases first")
#: what each status means on screen
STATUS_WORDS = {
    "positive": "positive",
    "negative": "negative",
    "uncertain": "uncertain",
    "blank": NOT_MENTIONED,
    "unlabelled": "no labels",
    "rare cases first": "any, rarest first (lowest archive density)",
}
#: the picker's status choices as listed: the label words, and the rare-cases order by its name
PICKER_LABELS = {**STATUS_WORDS, "rare cases first": "rare cases first"}
_WHOLE = re.compile(r"^\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+([.,]\d*)?|[.,]\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class PickerPage:
    """One page of the case picker."""

    # (label, image id) of the cases on this page
    choices: list[tuple[str, int]]
    # plain text: which cases of how many are listed, and how to see the others
    summary: str
    # 0-based page number and the number of pages (at least 1)
    page: int
    pages: int
    # cases that match the search and filter
    total: int


def parse_case_id(text: object) -> int | None:
    """A whole, positive case id typed by the user; None when ``text`` is not a number at all (an
    accession number, say); ValueError naming the problem for 2.5, -3, 0 or an empty box."""
    value = capped(text, "the case id or accession number", MAX_CASE_ID).strip()
    if not value:
        raise ValueError("type a case id (a whole number) or an accession number, or pick a case")
    if _WHOLE.match(value):
        if len(value.lstrip("0")) > MAX_ID_DIGITS:
            raise ValueError(
                f"a case id has at most {MAX_ID_DIGITS} digits; {value[:12]}… "
                f"({len(value)} digits) is not one"
            )
        number = int(value)
        if number < 1:
            raise ValueError(f"case ids start at 1; {value!r} is not one")
        return number
    if _NUMBER.match(value):
        raise ValueError(f"a case id is a whole number such as 12, not {value!r}")
    return None


def case_label(image_id: int, meta: dict, finding: str | None, label: object) -> str:
    """'case 12 · PA · F 61 · 2021-03-05 · Pleural Effusion: positive' (no identifiers)."""
    text = (
        f"case {int(image_id)} · {format_text(meta.get('view_position'))} · "
        f"{format_text(meta.get('patient_sex'))} {format_age(meta.get('patient_age_years'))} · "
        f"{format_date(meta.get('study_date'))}"
    )
    if finding:
        text += f" · {finding}: {label_word(label)}"
    return text


def page_summary(total: int, page: int, page_size: int, text: str, status: str | None) -> str:
    """'cases 51–100 of 3,001 (page 2 of 61)' plus what narrowed the list."""
    what = []
    if text:
        what.append(f"id or accession {text!r} (exact)")
    if status:
        what.append(f"label {STATUS_WORDS.get(status, status)}")
    narrowed = f" · {', '.join(what)}" if what else ""
    if total == 0:
        return f"no case matches{narrowed}"
    first = page * page_size + 1
    last = min(total, (page + 1) * page_size)
    pages = max(1, -(-total // page_size))
    return f"cases {first:,}–{last:,} of {total:,} (page {page + 1} of {pages}){narrowed}"


def gallery_page(
    gallery,
    text: str,
    finding: str | None,
    status: str | None,
    offset: int,
    limit: int,
) -> tuple[int, list[tuple[int, dict, object]]]:
    """(total, [(image id, metadata, the finding's label)]) from an in-memory gallery: the
    picker of a CaseLookup without a store (tests, library callers). Accession numbers match only
    when the gallery carries them."""
    ids = np.asarray(gallery.image_ids, dtype=np.int64)
    keep = np.ones(len(ids), dtype=bool)
    if text:  # exact id or accession number only (a prefix search would be an oracle)
        by_id = (ids == int(text)) if text.isdigit() and len(text) <= MAX_ID_DIGITS else False
        accession = gallery.metadata.get("accession_number")
        by_accession = (
            (accession.astype(str).str.upper() == text.upper()).to_numpy()
            if accession is not None
            else False
        )
        keep &= np.asarray(by_id | by_accession, dtype=bool)
    if status is not None and finding is not None:
        labels = gallery.labels
        values = labels[finding].to_numpy(dtype=float)
        any_label = labels.notna().any(axis=1).to_numpy()
        wanted = {
            "positive": values == 1.0,
            "negative": values == 0.0,
            "uncertain": values == -1.0,
            "blank": any_label & np.isnan(values),
            "unlabelled": ~any_label,
        }[status]
        keep &= wanted
    chosen = np.sort(ids[keep])
    rows = []
    for image_id in chosen[offset : offset + limit]:
        meta = gallery.metadata.loc[int(image_id)].to_dict()
        label = gallery.labels.loc[int(image_id)].get(finding) if finding else None
        rows.append((int(image_id), meta, label))
    return len(chosen), rows


#: which label codes of an archive index (chexretrieve.index.columns) each status keeps
_STATUS_CODES = {
    "positive": (1,),
    "negative": (0,),
    "uncertain": (-1,),
    "blank": (-2,),
    "unlabelled": (-3,),
}


def columns_page(
    gallery, store, text: str, finding: str | None, status: str | None, offset: int, limit: int
) -> tuple[int, list[tuple[int, dict, object]]]:
    """(total, [(image id, metadata, the finding's label)]) from an archive index's columns
    (chexretrieve.index.IndexGallery): no database query unless an accession number is typed
    (the store looks it up, exactly), no Python object per archived case."""
    from chexretrieve.findings import FINDINGS

    column = FINDINGS.index(finding) if finding else None
    if text:
        wanted = []
        if text.isdigit() and len(text) <= MAX_ID_DIGITS and int(text) in gallery:
            wanted.append(int(text))
        if store is not None:
            found = store.find_cases(text, encoder_id=gallery.encoder_id, limit=1000)
            wanted += [c.image_id for c in found.cases if c.image_id in gallery]
        rows = np.array(sorted({gallery.row_of(i) for i in wanted}), dtype=np.int64)
        rows = rows[np.argsort(gallery.image_ids[rows], kind="stable")]
    else:
        order = gallery.id_order()
        rows = order
    if status is not None and column is not None:
        codes = gallery.label_codes()[:, column]
        rows = rows[np.isin(codes[rows], _STATUS_CODES[status])]
    total = len(rows)
    page = rows[offset : offset + limit]
    metadata = gallery.metadata_records(page)
    labels = gallery.label_codes()[page, column] if column is not None else [None] * len(page)
    return total, [
        (int(gallery.image_ids[row]), meta, None if label is None or label < -1 else float(label))
        for row, meta, label in zip(page.tolist(), metadata, labels, strict=True)
    ]
