"""The retrieval protocol: which images are queries and keys, and which keys are relevant.

One :class:`RetrievalTask` per semantic coordinate. Relevance is always "the key carries the same
class as the query": for a finding every query is positive (class 1) and the relevant keys are the
positive ones; for a categorical coordinate (view, style, object class) every labelled image is a
query and the relevant keys share its value. Indices point into a :class:`LabelledArchive`.

Finding labels follow CheXpert: 1 positive, 0 negative, -1 uncertain, blank (NaN) not mentioned.

* keys   = images of ``key_split`` (default "train"); uncertain labels handled by ``uncertain_as``
  (default: the key is dropped for that finding); blanks by ``blank_as`` (default: negative);
* queries = images of ``query_split`` (default "valid") labelled 1; uncertain or blank never query;
* relevance = key label 1 (after the rules above);
* both only among the images of the configured views (``views``, default frontal), and only
  when the two splits share no patient (or the overlap is allowed): see ``evaluation.cohort``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from chexretrieve.evaluation.config import ProtocolConfig


@dataclass(frozen=True)
class LabelledArchive:
    """Images with splits and labels, in one fixed order shared by every encoder's embeddings."""

    image_ids: np.ndarray  # (n,) str
    splits: np.ndarray  # (n,) str, e.g. "train" / "valid"; "" when unknown
    labels: pd.DataFrame  # n rows in image_ids order; finding columns hold 1/0/-1/NaN

    def __post_init__(self) -> None:
        n = len(self.image_ids)
        if len(self.splits) != n or len(self.labels) != n:
            raise ValueError(
                f"archive parts disagree: {n} image ids, {len(self.splits)} splits, "
                f"{len(self.labels)} label rows; build them from one table"
            )
        if len(set(map(str, self.image_ids))) != n:
            raise ValueError("archive image ids are not unique; each image must appear once")

    def __len__(self) -> int:
        return len(self.image_ids)


@dataclass(frozen=True)
class RetrievalTask:
    """One coordinate's queries, keys and relevance classes (indices into the archive)."""

    name: str  # the coordinate, e.g. "Pleural Effusion" or "view"
    query_index: np.ndarray  # (n,) int archive rows of the queries
    key_index: np.ndarray  # (m,) int archive rows of the keys
    query_class: np.ndarray  # (n,) int class code of each query
    key_class: np.ndarray  # (m,) int class code of each key; -1 never matches
    exclude_self: bool = False  # leave-one-out: a query never ranks itself

    @property
    def n_queries(self) -> int:
        return int(len(self.query_index))

    @property
    def n_keys(self) -> int:
        return int(len(self.key_index))

    def relevance(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """(len(rows), m) bool: key is relevant to the query."""
        return self.key_class[None, :] == self.query_class[rows, None]

    def n_relevant(self) -> np.ndarray:
        """Relevant keys per query (excluding the query itself under leave-one-out)."""
        classes, counts = np.unique(self.key_class, return_counts=True)
        lookup = dict(zip(classes.tolist(), counts.tolist(), strict=True))
        out = np.array([lookup.get(int(c), 0) for c in self.query_class], dtype=np.int64)
        if self.exclude_self:
            in_keys = np.isin(self.query_index, self.key_index)
            out = out - in_keys.astype(np.int64)
        return out

    def prevalence(self) -> float:
        """Mean fraction of relevant keys per query (for a finding: positives / keys)."""
        if self.n_queries == 0 or self.n_keys == 0:
            return float("nan")
        denom = self.n_keys - (1 if self.exclude_self else 0)
        return float(np.mean(self.n_relevant()) / max(denom, 1))


def _finding_column(labels: pd.DataFrame, finding: str) -> pd.Series:
    if finding not in labels.columns:
        raise ValueError(
            f"the labels have no column {finding!r}; "
            f"available: {', '.join(map(str, labels.columns))}"
        )
    values = pd.to_numeric(labels[finding], errors="coerce")
    bad = ~values.isna() & ~values.isin([1, 0, -1])
    if bad.any():
        raise ValueError(
            f"finding column {finding!r} holds values other than 1, 0, -1 and blank "
            f"(e.g. {labels[finding][bad].iloc[0]!r}); fix the label table"
        )
    return values


def _usable(archive: LabelledArchive, config: ProtocolConfig, usable) -> np.ndarray:
    """The images in the configured views (evaluation.cohort), unless the caller passes them."""
    if usable is not None:
        return np.asarray(usable, dtype=bool)
    from chexretrieve.evaluation.cohort import select_cohort

    return select_cohort(archive, config).usable


def finding_task(
    archive: LabelledArchive,
    finding: str,
    config: ProtocolConfig,
    usable: np.ndarray | None = None,
) -> RetrievalTask:
    """Queries = query-split positives; keys = key split after the uncertain/blank rules; both
    among ``usable`` images (default: the configured views, patient overlap checked)."""
    values = _finding_column(archive.labels, finding).to_numpy(dtype=np.float64)
    splits = np.asarray(archive.splits).astype(str)
    usable = _usable(archive, config, usable)

    key_values = values.copy()
    blank = np.isnan(key_values)
    if config.blank_as == "negative":
        key_values[blank] = 0.0
    uncertain = key_values == -1
    if config.uncertain_as == "negative":
        key_values[uncertain] = 0.0
    elif config.uncertain_as == "positive":
        key_values[uncertain] = 1.0
    keep_key = usable & (splits == config.key_split) & ~np.isnan(key_values) & (key_values != -1)
    key_index = np.flatnonzero(keep_key)

    query_index = np.flatnonzero(usable & (splits == config.query_split) & (values == 1))
    return RetrievalTask(
        name=finding,
        query_index=query_index,
        key_index=key_index,
        query_class=np.ones(len(query_index), dtype=np.int64),
        key_class=(key_values[key_index] == 1).astype(np.int64),
    )


def category_task(
    archive: LabelledArchive,
    column: str,
    config: ProtocolConfig | None = None,
    *,
    leave_one_out: bool = False,
    usable: np.ndarray | None = None,
) -> RetrievalTask:
    """A categorical coordinate: relevant keys share the query's value of ``column``.

    With ``leave_one_out`` every labelled image is both query and key (never of itself); otherwise
    queries come from ``config.query_split`` and keys from ``config.key_split``.
    """
    if column not in archive.labels.columns:
        raise ValueError(
            f"the labels have no column {column!r}; "
            f"available: {', '.join(map(str, archive.labels))}"
        )
    raw = archive.labels[column]
    labelled = raw.notna().to_numpy()
    codes, _ = pd.factorize(raw.astype("string"), use_na_sentinel=True)
    codes = np.asarray(codes, dtype=np.int64)
    if leave_one_out:
        index = np.flatnonzero(labelled)
        return RetrievalTask(column, index, index, codes[index], codes[index], exclude_self=True)
    if config is None:
        raise ValueError("category_task needs a ProtocolConfig unless leave_one_out is set")
    splits = np.asarray(archive.splits).astype(str)
    usable = labelled & _usable(archive, config, usable)
    key_index = np.flatnonzero(usable & (splits == config.key_split))
    query_index = np.flatnonzero(usable & (splits == config.query_split))
    return RetrievalTask(column, query_index, key_index, codes[query_index], codes[key_index])


def task_summary(task: RetrievalTask) -> dict[str, float | int | str]:
    """n queries, n keys, relevant keys and prevalence of one task (a row of the data table)."""
    relevant = task.n_relevant()
    return {
        "coordinate": task.name,
        "n_queries": task.n_queries,
        "n_keys": task.n_keys,
        "n_relevant_keys": int(relevant.max()) if len(relevant) else 0,
        "prevalence": task.prevalence(),
    }
