"""Caps on what a user may type, checked before any work (issue 23, finding 8).

Every text field of the UI has a longest accepted length and every number a finite range; a value
beyond them is refused with a message naming the field and the limit, before anything is
searched, embedded, looked up or audited (so the audit trail never carries an oversized text).
The page's text boxes carry the same ``max_length`` so a browser stops typing there; the checks
here are the server's, for clients that are not the page.
"""

from __future__ import annotations

import math

#: longest free text mixed into a search (a clinical phrase, not a report)
MAX_FREE_TEXT = 500
#: longest case id or accession number typed in the case box
MAX_CASE_ID = 64
#: longest text of the case picker's id/accession box
MAX_PICKER_TEXT = 64
#: longest study-date filter box (YYYY-MM-DD, with room for spaces)
MAX_DATE_TEXT = 32
#: longest anchor-set key ("finding@version", with a variant)
MAX_ANCHOR_KEY = 200
#: longest anchor-set text edited in the curation tab, and its description
MAX_CURATION_TEXT = 100_000
MAX_DESCRIPTION = 2_000
#: the most digits of a case id (ids are 64-bit integers)
MAX_ID_DIGITS = 18


def capped(value: object, what: str, limit: int) -> str:
    """``value`` as text ("" for None) when at most ``limit`` characters; ValueError otherwise."""
    if value is None:
        return ""
    if not isinstance(value, str):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{what} must be text, not {type(value).__name__}")
        value = str(value)
    if len(value) > limit:
        raise ValueError(
            f"{what} is {len(value):,} characters long; at most {limit:,} are accepted "
            "(shorten it; nothing was done)"
        )
    return value


def bounded_number(
    value: object, what: str, low: float, high: float, unit: str = ""
) -> float | None:
    """``value`` as a finite float in [low, high] (None for an empty value); ValueError naming
    NaN, infinity, a huge number or text (``unit``, e.g. "years", is named in the messages)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    kind = f"a number of {unit}" if unit else "a number"
    span = f"between {low:g} and {high:g}" + (f" {unit}" if unit else "")
    if isinstance(value, bool):
        raise ValueError(f"{what} must be {kind}, not {value!r}")
    if isinstance(value, str):
        capped(value, what, 32)
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{what} must be {span}; that number is too large") from None
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be {kind}, not {str(value)[:40]!r}") from None
    if math.isnan(number):
        raise ValueError(f"{what} must be {kind} {span.replace(f' {unit}', '')}, not NaN")
    if not low <= number <= high:
        shown = ("-" if number < 0 else "") + "infinity" if math.isinf(number) else f"{number:g}"
        raise ValueError(f"{what} must be {span}, not {shown}")
    return number
