"""JSON that every parser reads (issue 34, item 13): what the command line prints with ``--json``
and writes to report files.

Python's ``json.dumps`` writes ``NaN`` and ``Infinity`` for non-finite floats by default, which
JavaScript's ``JSON.parse``, jq and every strict parser refuse; pandas gives NaN (and NaT, NA)
for every missing value of a table (a JPEG archive's ``view_position``). Here a missing or
non-finite number is ``null``, numpy scalars and arrays become numbers and lists, dates become
ISO 8601 strings, and anything else unknown is refused by ``json`` with ``allow_nan=False``
as the last guard.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import PurePath

import numpy as np


def jsonable(value: object) -> object:
    """``value`` with every missing or non-finite number as None and numpy / dates / paths as
    JSON's own types (dicts, lists and tuples recursively)."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        return [jsonable(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    if _is_missing(value):  # pandas NA, NaT (a datetime subclass whose isoformat is 'NaT')
        return None
    if isinstance(value, dt.datetime | dt.date | dt.time):  # pandas Timestamp included
        return value.isoformat()
    return str(value)


def _is_missing(value: object) -> bool:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def dumps(value: object, **options) -> str:
    """Strict JSON text of ``value`` (see :func:`jsonable`); ``options`` as for ``json.dumps``."""
    return json.dumps(jsonable(value), allow_nan=False, **options)
