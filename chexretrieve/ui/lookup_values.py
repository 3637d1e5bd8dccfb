"""The case lookup's plain values (no Gradio): the query of one browser session, the search
panel's settings and one results page (``chexretrieve.ui.handlers`` makes and takes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chexretrieve.search.gallery import SearchFilters
from chexretrieve.search.service import SearchResult
from chexretrieve.ui.results_html import ResultRow


@dataclass(frozen=True)
class QueryImage:
    """The current query of one browser session (kept in Gradio's per-session state)."""

    # "case" (an archived image) or "upload"
    source: str
    # how the query is named on screen ("case 12", "upload chest-pa.dcm": its file name)
    name: str
    # display pixels of the query preview, float32 in [0, 1]: an archived case's stored thumbnail,
    # else its file (or an upload) shrunk to ~3 thumbnails wide
    pixels: np.ndarray
    # PHI-minimal metadata (see render.DETAIL_FIELDS); raw values, escaped when shown
    metadata: dict
    # archived image id (source == "case")
    case_id: int | None = None
    # unit embedding of an uploaded image, computed once at upload
    embedding: np.ndarray | None = None
    # what the reader tolerated (shown under the details)
    notes: tuple[str, ...] = ()
    # every finding's label of an archived case (None = not labelled / an upload)
    labels: dict | None = None
    # report text of an archived case, when the archive has reports
    report: str | None = None
    # an upload's pixel values for the compare viewer (archived cases are read on demand)
    values: object | None = None
    # an upload's StudyInstanceUID and pixel hash: archived images of that study or with the
    # same pixels are never results (the query's own study)
    study_uid: str | None = None
    pixel_sha256: str | None = None
    # an upload's content signature: archived copies of it (PNG, JPEG, resized) are never results
    signature: np.ndarray | None = None


@dataclass(frozen=True)
class SearchSettings:
    """Everything in the search panel except the query."""

    finding: str
    geometry: str = "softmax"
    # "id@version"; None = the finding's latest set
    anchor_set: str | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)
    top_k: int = 12
    # free text mixed into the image query (composite query)
    text: str | None = None


@dataclass(frozen=True)
class ResultsPage:
    """One ranking ready for the screen."""

    # the search under the chosen geometry (as audited)
    result: SearchResult
    # the results with percentiles, thumbnails, reports and the optional baseline
    rows: tuple[ResultRow, ...]
    # plain-text heading and legend
    title: str
    legend: str
    # escaped HTML of the cards, the table and the legend
    html: str
    # whether the cosine baseline column is shown
    baseline: bool = False

    @property
    def image_ids(self) -> tuple[int, ...]:
        return tuple(int(r.hit.image_id) for r in self.rows)
