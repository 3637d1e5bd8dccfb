"""The search filters from the filter widgets' values (no Gradio)."""

from __future__ import annotations

import datetime as dt

from chexretrieve.search.gallery import SearchFilters
from chexretrieve.ui.input_limits import MAX_DATE_TEXT, bounded_number, capped

#: the age range the filter widgets start at; a bound left at its end means "no bound" (so cases
#: of unknown age are kept until the user narrows the range)
AGE_ANY = (0, 120)


def parse_filters(
    views: list[str] | None,
    sex: str | None,
    age_min: float | None,
    age_max: float | None,
    date_from: str | None,
    date_to: str | None,
    label_known: bool,
) -> SearchFilters:
    """SearchFilters from the filter widgets; ValueError naming a bad date or range.

    Empty values, and ages left at the ends of ``AGE_ANY``, mean no bound.
    """

    def date(value: str | None, name: str) -> dt.date | None:
        value = capped(value, name, MAX_DATE_TEXT)
        if not value.strip():
            return None
        try:
            return dt.date.fromisoformat(str(value).strip()[:10])
        except ValueError:
            raise ValueError(f"{name} must be a date like 2024-03-31, not {value!r}") from None

    def number(value, open_end: float, name: str) -> float | None:
        years = bounded_number(value, name, *AGE_ANY, unit="years")
        return None if years is None or years == open_end else years

    return SearchFilters(
        views=tuple(views or ()),
        sex=None if not sex or sex == "any" else sex,
        age_min=number(age_min, AGE_ANY[0], "'age from'"),
        age_max=number(age_max, AGE_ANY[1], "'age to'"),
        date_from=date(date_from, "'date from'"),
        date_to=date(date_to, "'date to'"),
        label_known=bool(label_known),
    )
