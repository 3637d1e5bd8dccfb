"""What a search is asked and what it answers (the service's plain records and protocols)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from chexretrieve.search.explain import Explanation
from chexretrieve.search.gallery import SearchFilters


@dataclass(frozen=True)
class AnchorSetRef:
    # "id@version" of the anchor set
    key: str
    # content hash of the set (changes with every edit)
    content_hash: str
    # the sentences, in the order of the embedding rows
    sentences: tuple[str, ...]
    # (N, d) unit text embeddings of the sentences under the service's encoder
    embeddings: np.ndarray
    # "positive" / "negative" per sentence (what it says of the finding); () when not known
    polarities: tuple[str, ...] = ()


class AnchorProvider(Protocol):
    def anchor_set(self, finding: str, key: str | None) -> AnchorSetRef:
        """The finding's anchor set (``key`` = "id@version", None = latest), embedded."""
        ...

    def broad_prior(self) -> tuple[str, np.ndarray]:
        """(content hash, (M, d) embeddings) of the broad clinical prior corpus."""
        ...


@dataclass(frozen=True)
class SearchRequest:
    # the finding that defines similarity (a CheXpert name)
    finding: str
    # geometry name (see chexretrieve.search.features.GEOMETRY_CHOICES)
    geometry: str = "softmax"
    # archived case (image id) to query by; exactly one of case_id / image_embedding / image
    case_id: int | None = None
    # an already computed unit embedding of an uploaded image
    image_embedding: np.ndarray | None = None
    # decoded pixels of an uploaded image (2-D float32 in [0, 1]); embedded on the fly
    image: np.ndarray | None = None
    # optional free text combined with the image (composite query)
    text: str | None = None
    # anchor set "id@version"; None = the finding's latest set
    anchor_set: str | None = None
    # results wanted; None = SearchConfig.default_top_k
    top_k: int | None = None
    # metadata filters
    filters: SearchFilters = field(default_factory=SearchFilters)
    # image ids the user marked relevant (relevance feedback)
    relevant: tuple[int, ...] = ()
    # image ids the user marked not relevant (relevance feedback)
    not_relevant: tuple[int, ...] = ()
    # attach an anchor explanation to every hit
    explain: bool = False
    # StudyInstanceUID of an uploaded query: archived images of that study are never returned
    # (an archived case's own study is always excluded)
    query_study_uid: str | None = None
    # pixel hash of an uploaded query (chexretrieve.dicom.Radiograph.pixel_sha256): archived
    # images with exactly these pixels are never returned, whatever their UIDs
    query_pixel_sha256: str | None = None
    # content signature of an uploaded query (chexretrieve.search.duplicates.content_signature):
    # archived copies of it (re-encoded as PNG / JPEG, resized) are never returned
    query_signature: np.ndarray | None = None
    # archived images never returned (the case lookup passes the results marked not relevant)
    exclude_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SearchHit:
    rank: int
    image_id: int
    score: float
    metadata: dict
    labels: dict
    explanation: Explanation | None = None
    # with explain and an archive density: the result's concept decomposition (ConceptShare)
    concepts: tuple = ()


@dataclass(frozen=True)
class SearchResult:
    finding: str
    geometry: str
    anchor_set: str
    encoder_id: str
    hits: tuple[SearchHit, ...]
    candidates: int  # gallery rows that passed the filters
    # chexretrieve.density QueryDensity (log-density, percentile, OOD flag) or DensityUnavailable;
    # None when the service has no density provider
    density: object | None = None
    # the sets of a posterior geometry's prior (key, content_hash, folder, private); () otherwise
    prior: tuple = ()
    # per hit, how many candidates score at least as high (itself and ties included): its exact
    # standing, from the ranking's own scan; None when the ranking was not exact (ANN, shards)
    standing: tuple[int, ...] | None = None


class FeaturesBeingPrepared(ValueError):
    """The features of a (finding, geometry) an archive index builds in the background, so the
    search does not wait for them; ``str()`` says how far the build is ("being prepared (n %)")."""
