"""CheXpert-format label files: a ``Path`` column plus one column per finding (1 / 0 / -1 / blank).

Policy (stored as given; evaluation decides how to use them): 1 = positive, 0 = negative,
-1 = uncertain, blank = not mentioned (stored as NULL, read back as NaN). Columns that are not one
of the 13 findings (Sex, Age, Frontal/Lateral, AP/PA, No Finding) are ignored, except one that
nearly spells a finding (``Pleural Efusion``): the file is refused, naming the finding meant. The
split of a row is its ``Split`` column when there is one, else the first component of its Path
that is ``train``, ``valid``/``validation`` or ``test`` (CheXpert's layout), else none.

Matching a file to a row (paths compared with '/' separators, whole components only):
1. the row's Path equals the file's path relative to the folder argument it was found under;
2. or the row's Path is a trailing part of the file's absolute path;
3. or the row's Path is a common prefix (such as ``CheXpert-v1.0-small/``) followed by the
   relative path; prefixes are learnt from the rows, and a relative path that ends several rows
   is ambiguous and left unlabelled.
A file matching no row stays unlabelled; rows matching no file are counted in the summary.
"""

from __future__ import annotations

import csv
import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from chexretrieve.datasets.tables import open_text
from chexretrieve.findings import FINDINGS, canonical_finding

SPLIT_NAMES = {"train": "train", "valid": "valid", "validation": "valid", "validate": "valid",
               "test": "test"}  # fmt: skip
#: columns of the public label files that are not findings (CheXpert, CheXpert's test
#: groundtruth.csv, MIMIC-CXR-JPG's tables), compared lower-case: never taken for misspelt findings
KNOWN_OTHER_COLUMNS = frozenset(
    {"sex", "age", "frontal/lateral", "ap/pa", "no finding", "study", "subject id", "study id",
     "dicom id", "viewposition", "view position", "split"}
)  # fmt: skip
#: unmatched files that may trigger a scan of all rows to learn a new path prefix
MAX_PREFIX_SCANS = 20


@dataclass(frozen=True)
class LabelRow:
    line: int  # line number in the CSV (header = 1)
    path: str  # the Path value with '/' separators
    labels: dict[str, float | None]  # canonical finding -> 1.0 / 0.0 / -1.0 / None (blank)
    split: str | None

    def image_fields(self, source_format: str | None) -> dict[str, object]:  # noqa: ARG002
        """A plain labels row sets no image columns (the split is applied apart)."""
        return {}


@dataclass
class LabelTable:
    source: Path
    rows: list[LabelRow]
    ignored_columns: tuple[str, ...] = ()
    _by_path: dict[str, LabelRow] = field(default_factory=dict, repr=False)
    _prefixes: list[str] = field(default_factory=list, repr=False)
    _scans: int = 0
    _matched_lines: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self._by_path = {row.path: row for row in self.rows}

    @classmethod
    def load(cls, path: str | Path) -> LabelTable:
        return read_label_csv(path)

    def match(self, file: Path, root: Path) -> LabelRow | None:
        """The row for ``file`` found under folder argument ``root`` (rules in the module doc)."""
        try:
            relative = file.relative_to(root).as_posix()
        except ValueError:
            relative = file.name
        row = self._by_path.get(relative)
        if row is None:
            parts = PurePosixPath(file.as_posix()).parts
            for start in range(1, len(parts)):
                row = self._by_path.get("/".join(parts[start:]))
                if row is not None:
                    break
        if row is None:
            row = self._match_with_prefix(relative)
        if row is not None:
            self._matched_lines.add(row.line)
        return row

    def _match_with_prefix(self, relative: str) -> LabelRow | None:
        for prefix in self._prefixes:
            row = self._by_path.get(prefix + relative)
            if row is not None:
                return row
        if self._scans >= MAX_PREFIX_SCANS:
            return None
        self._scans += 1
        ending = "/" + relative
        found = [row for row in self.rows if row.path.endswith(ending)]
        if len(found) != 1:
            return None
        self._prefixes.append(found[0].path[: -len(relative)])
        return found[0]

    @property
    def unmatched_rows(self) -> int:
        return len(self.rows) - len(self._matched_lines)


def read_label_csv(path: str | Path) -> LabelTable:
    """Parse and validate a CheXpert-format CSV; ValueError names the file, line and column."""
    source = Path(path)
    try:
        handle = open_text(source)  # plain or gzip (.csv.gz)
    except ValueError as exc:
        raise ValueError(f"cannot read labels file: {exc}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"labels file {source} is empty; expected a Path header") from None
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ValueError(f"labels file {source} is not a readable CSV: {exc}") from None
        columns = _classify_columns(source, header)
        rows: list[LabelRow] = []
        seen: dict[str, int] = {}
        try:
            for record in reader:
                line = reader.line_num
                if not any(cell.strip() for cell in record):
                    continue
                row = _parse_row(source, line, header, record, columns)
                if row.path in seen:
                    raise ValueError(
                        f"{source}:{line}: Path {row.path!r} already appeared on line "
                        f"{seen[row.path]}; each image needs exactly one labels row"
                    )
                seen[row.path] = line
                rows.append(row)
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ValueError(f"{source}:{reader.line_num}: unreadable CSV line: {exc}") from None
    return LabelTable(source, rows, columns["ignored"])


def _classify_columns(source: Path, header: list[str]) -> dict:
    names = [h.strip() for h in header]
    lowered = [n.lower() for n in names]
    if "path" not in lowered:
        raise ValueError(
            f"labels file {source} has no 'Path' column (columns: {names}); expected the "
            "CheXpert format: Path plus one column per finding"
        )
    findings: dict[int, str] = {}
    ignored: list[str] = []
    split_index = lowered.index("split") if "split" in lowered else None
    for index, name in enumerate(names):
        if index in (lowered.index("path"), split_index):
            continue
        try:
            finding = canonical_finding(name)
        except ValueError:
            _refuse_misspelt_finding(source, name)
            ignored.append(name)
            continue
        if finding in findings.values():
            raise ValueError(f"labels file {source} has the column {finding!r} twice")
        findings[index] = finding
    if not findings:
        raise ValueError(
            f"labels file {source} has no finding columns (columns: {names}); expected some of "
            "the 13 CheXpert findings, e.g. 'Pleural Effusion'"
        )
    return {
        "path": lowered.index("path"),
        "split": split_index,
        "findings": findings,
        "ignored": tuple(ignored),
    }


def _refuse_misspelt_finding(source: Path, name: str) -> None:
    """A column that is no finding but nearly spells one (``Pleural Efusion``) is a typo, not a
    column to ignore: ingesting the rest would silently leave that finding unlabelled."""
    key = _key(name)
    if key in KNOWN_OTHER_COLUMNS:
        return
    close = difflib.get_close_matches(key, [_key(f) for f in FINDINGS], n=1, cutoff=0.8)
    if close:
        meant = next(f for f in FINDINGS if _key(f) == close[0])
        raise ValueError(
            f"labels file {source} has a column {name!r}, which is not a finding; did you mean "
            f"{meant!r}? Rename the column (nothing was ingested)"
        )


def _key(name: str) -> str:
    return " ".join(name.strip().lower().replace("_", " ").replace("-", " ").split())


def _parse_row(source: Path, line: int, header: list[str], record: list[str], columns: dict):
    if len(record) != len(header):
        raise ValueError(
            f"{source}:{line}: {len(record)} fields, but the header has {len(header)}; "
            "check for unquoted commas"
        )
    raw_path = record[columns["path"]].strip().replace("\\", "/")
    while raw_path.startswith("./"):
        raw_path = raw_path[2:]
    if not raw_path:
        raise ValueError(f"{source}:{line}: empty Path")
    labels: dict[str, float | None] = {}
    for index, finding in columns["findings"].items():
        labels[finding] = _parse_value(source, line, header[index], record[index])
    if columns["split"] is not None:
        split = record[columns["split"]].strip().lower() or None
        if split is not None and split not in SPLIT_NAMES:
            raise ValueError(
                f"{source}:{line}: Split {split!r} is not one of train, valid, validation, "
                "validate, test"
            )
        split = SPLIT_NAMES.get(split) if split else None
    else:
        components = raw_path.split("/")[:-1]
        split = next((SPLIT_NAMES[c.lower()] for c in components if c.lower() in SPLIT_NAMES), None)
    return LabelRow(line, raw_path, labels, split)


def _parse_value(source: Path, line: int, column: str, cell: str) -> float | None:
    text = cell.strip()
    if text == "" or text.lower() == "nan":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.inf
    if value not in (1.0, 0.0, -1.0):
        raise ValueError(
            f"{source}:{line}: column {column.strip()!r} has {cell!r}; expected 1, 0, -1 "
            "(uncertain) or blank (not mentioned)"
        )
    return value


@dataclass(frozen=True)
class MergedRow:
    """What several label sources say about one file (later sources win per finding)."""

    labels: dict[str, float | None] | None
    split: str | None
    rows: tuple = ()  # the sources' rows, in source order

    def image_fields(self, source_format: str | None) -> dict[str, object]:
        fields: dict[str, object] = {}
        for row in self.rows:
            fields.update(row.image_fields(source_format))
        return fields


class LabelSources:
    """Several label sources (``LabelTable`` CSVs, data-set indexes) matched as one.

    A file's labels are the union of its rows' labels (a later source wins for a finding both
    give), its split the last one given, its image columns merged the same way.
    """

    def __init__(self, sources: list) -> None:  # noqa: ANN001
        if not sources:
            raise ValueError("LabelSources needs at least one labels source")
        self.sources = list(sources)

    @property
    def source(self) -> str:
        return "; ".join(str(s.source) for s in self.sources)

    @property
    def rows(self) -> list:
        return [row for s in self.sources for row in s.rows]

    @property
    def unmatched_rows(self) -> int:
        return sum(s.unmatched_rows for s in self.sources)

    def match(self, file: Path, root: Path) -> MergedRow | None:
        found = [row for s in self.sources if (row := s.match(file, root)) is not None]
        if not found:
            return None
        labels: dict[str, float | None] = {}
        split = None
        for row in found:
            labels.update(row.labels or {})
            split = row.split or split
        return MergedRow(labels or None, split, tuple(found))
