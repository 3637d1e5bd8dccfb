"""How the gallery's columns are stored in the archive index: one row file per column.

Every metadata column of a gallery (``chexretrieve.store.IMAGE_COLUMNS``) is one row file of one
of these kinds:

* ``category`` (view, sex, split, modality, ...: few distinct values): int32 codes, -1 when
  unknown; the values themselves are listed in the manifest, in the order first seen (an append
  only adds values, so earlier codes keep their meaning);
* ``text`` (UIDs, paths, hashes): UTF-8 bytes in fixed-width rows (``|S<width>``), empty when
  unknown; the width is the longest value rounded up to 8 bytes (a longer value later rewrites
  the column wider);
* ``float`` (age, pixel spacing, window): float64, NaN when unknown;
* ``int`` (pixel rows and columns): int32, -1 when unknown;
* ``date`` (study date): int32 days since 1970-01-01, ``NO_DATE`` when unknown.

Labels are one int8 row file of ``len(FINDINGS)`` columns: 1 / 0 / -1 as stored, ``BLANK`` when
the image has labels but not this finding's, ``UNLABELLED`` when it has none.
"""

from __future__ import annotations

import datetime as dt

import numpy as np

from chexretrieve.findings import FINDINGS
from chexretrieve.store import IMAGE_COLUMNS

#: label code of a finding the image's labels leave blank (not mentioned)
BLANK = -2
#: label code of an image without any label
UNLABELLED = -3
#: date code of an unknown study date
NO_DATE = np.iinfo(np.int32).min
_EPOCH = dt.date(1970, 1, 1)

CATEGORY_COLUMNS = (
    "patient_sex",
    "view_position",
    "manufacturer",
    "body_part",
    "photometric",
    "modality",
    "transfer_syntax",
    "source_format",
    "split",
    "view_group",
)
FLOAT_COLUMNS = (
    "patient_age_years",
    "pixel_spacing_row_mm",
    "pixel_spacing_col_mm",
    "window_center",
    "window_width",
)
INT_COLUMNS = ("pixel_rows", "pixel_columns")
DATE_COLUMNS = ("study_date",)


def column_kind(name: str) -> str:
    if name in CATEGORY_COLUMNS:
        return "category"
    if name in FLOAT_COLUMNS:
        return "float"
    if name in INT_COLUMNS:
        return "int"
    if name in DATE_COLUMNS:
        return "date"
    return "text"


#: name -> kind of every stored metadata column, in IMAGE_COLUMNS order
COLUMN_KINDS = {name: column_kind(name) for name in IMAGE_COLUMNS}
_DTYPES = {"category": "int32", "float": "float64", "int": "int32", "date": "int32"}


def text_width(values) -> int:
    """Bytes a text column needs for ``values`` (8 at least, a multiple of 8)."""
    longest = max((len(v.encode("utf-8")) for v in values if isinstance(v, str)), default=0)
    return max(8, -(-longest // 8) * 8)


def encode_column(name: str, values: list, categories: list, width: int = 0) -> np.ndarray:
    """One column of a chunk as the array its row file holds; ``categories`` (of a category
    column) is extended with values not seen before. ``width``: a text column's byte width."""
    kind = COLUMN_KINDS[name]
    if kind == "category":
        position = {value: code for code, value in enumerate(categories)}
        codes = np.empty(len(values), dtype=np.int32)
        for row, value in enumerate(values):
            if value is None or (isinstance(value, float) and value != value):
                codes[row] = -1
                continue
            value = str(value)
            code = position.get(value)
            if code is None:
                code = position[value] = len(categories)
                categories.append(value)
            codes[row] = code
        return codes
    if kind == "float":
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    if kind == "int":
        return np.array([-1 if v is None else int(v) for v in values], dtype=np.int32)
    if kind == "date":
        return np.array([date_code(v) for v in values], dtype=np.int32)
    encoded = [v.encode("utf-8") if isinstance(v, str) else b"" for v in values]
    return np.array(encoded, dtype=f"S{width}")


def column_dtype(name: str, width: int = 0) -> str:
    kind = COLUMN_KINDS[name]
    return f"|S{width}" if kind == "text" else _DTYPES[kind]


def date_code(value) -> int:
    if value is None:
        return int(NO_DATE)
    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, str):
        try:
            value = dt.date.fromisoformat(value[:10])
        except ValueError:
            return int(NO_DATE)
    return (value - _EPOCH).days


def decode_values(name: str, raw: np.ndarray, categories: list) -> list:
    """Stored values of one column back to Python values (None when unknown)."""
    kind = COLUMN_KINDS[name]
    if kind == "category":
        return [None if c < 0 else categories[c] for c in raw.tolist()]
    if kind == "float":
        return [None if v != v else v for v in raw.tolist()]
    if kind == "int":
        return [None if v < 0 else v for v in raw.tolist()]
    if kind == "date":
        return [None if v == NO_DATE else _EPOCH + dt.timedelta(days=v) for v in raw.tolist()]
    return [v.decode("utf-8", "replace") or None for v in raw.tolist()]


def encode_labels(values: np.ndarray, labelled: np.ndarray) -> np.ndarray:
    """(n, findings) float labels (NaN blank) and per-row 'has labels' -> int8 label codes."""
    values = np.asarray(values, dtype=np.float32)
    codes = np.where(np.isnan(values), BLANK, np.nan_to_num(values)).astype(np.int8)
    codes[~np.asarray(labelled, dtype=bool)] = UNLABELLED
    return codes


def label_floats(codes: np.ndarray) -> np.ndarray:
    """int8 label codes -> float64 labels, NaN for blank or unlabelled (what galleries hold)."""
    out = codes.astype(np.float64)
    out[codes < -1] = np.nan
    return out


def labels_dict(codes_row: np.ndarray) -> dict:
    """One row's label codes as {finding: 1.0 / 0.0 / -1.0 / NaN} in FINDINGS order."""
    return {
        f: (float(v) if v >= -1 else float("nan"))
        for f, v in zip(FINDINGS, codes_row.tolist(), strict=True)
    }
