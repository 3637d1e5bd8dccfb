"""The search service: query by case or image, for one finding, under one geometry.

No UI code here: the CLI and the Gradio app both call ``SearchService.search``.

Composite query: with free text, the query embedding is the normalised mix
(1 − w)·λ_image + w·t_text (w = ``SearchConfig.text_weight``).
Relevance feedback: the score of key k becomes
s(q, k) + β · mean_{r ∈ relevant} s(r, k) − γ · mean_{n ∈ not relevant} s(n, k),
under the same geometry (a Rocchio update; every geometry's score is linear in the query vector, so
this is the score of the Rocchio-moved query, computed from cached features alone).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

from chexretrieve.findings import canonical_finding
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.duplicates import find_copies
from chexretrieve.search.explain import (
    Explanation,
    explain_gaussian_pair,
    explain_pair,
    without_other_side,
)
from chexretrieve.search.features import (
    FeatureCache,
    GeometrySpec,
    default_cache_folder,
    parse_geometry,
)
from chexretrieve.search.foreground import FOREGROUND
from chexretrieve.search.gallery import (
    Exclusions,
    Gallery,
    eligible_mask,
    with_embeddings,
)
from chexretrieve.search.requests import (
    AnchorProvider,
    AnchorSetRef,
    FeaturesBeingPrepared,
    SearchHit,
    SearchRequest,
    SearchResult,
)
from chexretrieve.search.scoring import KeyMatrix, one_blas_thread, rank_exactly
from chexretrieve.search.service_calibration import CalibrationMixin

__all__ = [
    "AnchorProvider",
    "AnchorSetRef",
    "FeaturesBeingPrepared",
    "SearchHit",
    "SearchRequest",
    "SearchResult",
    "SearchService",
    "top_ids",
]


class SearchService(CalibrationMixin):
    """Searches one encoder's gallery; cheap to call repeatedly (features are cached)."""

    def __init__(
        self,
        gallery: Callable[[], Gallery],
        anchors: AnchorProvider,
        encoder=None,
        config: SearchConfig | None = None,
        audit=None,
        revision: Callable[[], int] | None = None,
        density=None,
        thumbnails=None,
        index=None,
        shards=None,
    ):
        self.config = config or SearchConfig()
        # optional chexretrieve.distributed.ray_search.RaySearchBackend: ranks the archive index
        # in Ray actors holding one shard each (SearchConfig.sharding); None = in this process
        self.shards = shards
        # optional archive index (chexretrieve.index.ArchiveIndex): the gallery's features and
        # rank calibrations as built at ingest, scanned in place; what it lacks is computed here
        self.index = index
        # optional chexretrieve.density.ArchiveDensityProvider: every search is assessed by it
        self.density = density
        # the archive's generation (chexretrieve.store.Store.archive_revision): read before every
        # search, one small query; when it moved, the gallery is reloaded and its features
        # extended or recomputed, so a running server sees an ingest in its next search
        self._revision = revision
        self._gallery_revision: int | None = None
        # optional chexretrieve.audit.AuditLog: every search is recorded with its user and results
        self.audit = audit
        # optional image ids -> stored thumbnail PNGs (Store.read_thumbnails): the content of
        # archived images, to find copies of an uploaded query (chexretrieve.search.duplicates)
        self.thumbnails = thumbnails
        self._copies_cache: dict[tuple, tuple[int, ...]] = {}
        self._nearest: dict[tuple, float] = {}  # nearest_cosine of the last queries
        # (archive fingerprint, geometry, anchor set, finding, top k) -> RankCalibration; only the
        # current archive's entries are kept (rank_calibration drops the others)
        self._calibrations: dict[tuple, object] = {}
        self._load_gallery = gallery
        self._gallery: Gallery | None = None
        self._gallery_lock = threading.Lock()
        self.anchors = anchors
        self.encoder = encoder
        folder = self.config.feature_cache_dir or default_cache_folder()
        self.cache = FeatureCache(
            folder,
            self.config.memory_cache_entries,
            self.config.index_cache_entries,
            self.config.storage_dtype,
        )

    # ----------------------------------------------------------------------------- gallery
    @property
    def gallery(self) -> Gallery:
        gallery = self._gallery
        if gallery is not None:
            return gallery
        with self._gallery_lock:  # one load at a time: concurrent searches wait for it
            if self._gallery is None:
                self._gallery = self._reload()
            return self._gallery

    def _reload(self) -> Gallery:
        """Load the gallery (call under ``_gallery_lock``). The revision is read *before* the
        load: an ingest committing meanwhile makes the next search reload again, never miss."""
        revision = self._read_revision() if self._revision is not None else None
        gallery = self._stored(self._load_gallery())
        self._gallery_revision = revision
        return gallery

    def _read_revision(self) -> int:
        try:
            return int(self._revision())  # type: ignore[misc]
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - a database error, named in one line
            raise ValueError(
                f"cannot read the archive's revision ({type(exc).__name__}: {exc}); the search "
                "is refused rather than answered from a possibly stale gallery"
            ) from None

    def current_gallery(self) -> Gallery:
        """The gallery, reloaded first when the archive's revision moved since it was loaded."""
        gallery = self.gallery
        if self._revision is None:
            return gallery
        revision = self._read_revision()
        if revision == self._gallery_revision:
            return gallery
        with self._gallery_lock:
            if self._gallery is not None and self._gallery_revision == revision:
                return self._gallery  # another request reloaded it meanwhile
            self._gallery = self._reload()
            return self._gallery

    def _stored(self, gallery: Gallery) -> Gallery:
        """The gallery with its embeddings held once, in SearchConfig.storage_dtype, in the
        ``KeyMatrix`` that cosine and ITI search scan directly (an index's mapped gallery as is)."""
        if getattr(gallery, "mapped", False):
            return gallery
        keys = KeyMatrix.owning(gallery.embeddings)
        if keys is not None and keys.dtype == self.config.storage_dtype:
            return gallery
        keys = KeyMatrix.from_rows(gallery.embeddings, self.config.storage_dtype)
        return with_embeddings(gallery, keys.array)

    def refresh(self) -> None:
        """Reload the gallery (after an ingest); features recompute only if the archive changed."""
        with self._gallery_lock:
            self._gallery = None
            self._gallery_revision = None

    def gallery_containing(self, *image_ids: int | None) -> Gallery:
        """The gallery, reloaded once when it lacks one of ``image_ids`` (an image ingested after
        it was loaded: a case picked from the store while ingest is writing must not fail).

        Loads are serialised and each starts after the one before it ended, so the gallery held
        only grows; a request whose id is still missing after its own reload gets the usual
        "case N is not in the archive" error from the gallery.
        """
        wanted = [int(i) for i in image_ids if i is not None]
        gallery = self.current_gallery()
        if all(i in gallery for i in wanted):
            return gallery
        with self._gallery_lock:
            current = self._gallery
            if current is not None and current is not gallery and all(i in current for i in wanted):
                return current  # another request reloaded it meanwhile
            self._gallery = self._reload()  # started after the miss
            return self._gallery

    def _gallery_for(self, request: SearchRequest, *image_ids: int) -> Gallery:
        return self.gallery_containing(
            request.case_id, *request.relevant, *request.not_relevant, *image_ids
        )

    @property
    def inv_temperature(self) -> float:
        if self.encoder is not None:
            return float(self.encoder.inv_temperature)
        return 100.0

    # ------------------------------------------------------------------------------ search
    def search(self, request: SearchRequest, user: str | None = None) -> SearchResult:
        """Rank the gallery for ``request``; ``user`` names who asked, for the audit trail.
        Background checks of the index wait meanwhile (``FOREGROUND``)."""
        with FOREGROUND.searching():
            return self._search(request, user)

    def _search(self, request: SearchRequest, user: str | None) -> SearchResult:
        finding = canonical_finding(request.finding)
        spec = parse_geometry(request.geometry)
        top_k = self._top_k(request.top_k)
        gallery = self._gallery_for(request)
        query, own_row = self._query_embedding(request, gallery)
        anchor_set = self.anchors.anchor_set(finding, request.anchor_set)
        where = (request, spec, anchor_set, gallery, query, own_row, top_k)
        ranked = None if self.shards is None else self.shards.rank(self, *where)  # None: here
        # a sharded ranking is merged from the shards' top k: no exact standing
        ranked = (*ranked, None) if ranked else self._rank(finding, *where)
        rows, scores, candidates, standing = ranked
        hits = self._hits(rows, scores, gallery, query, anchor_set, request.explain)
        assessment = None
        if self.density is not None:
            assessment = self.density.assess(query, gallery)
            if request.explain and hits and assessment.concepts:
                hits = self.density.with_concepts(hits, gallery)
        result = SearchResult(
            finding=finding,
            geometry=spec.name,
            anchor_set=anchor_set.key,
            encoder_id=gallery.encoder_id,
            hits=hits,
            candidates=candidates,
            density=assessment,
            prior=self._prior_named(spec),
            standing=None if standing is None else tuple(int(n) for n in standing),
        )
        if self.audit is not None:
            study = request.query_study_uid
            if request.case_id is not None and gallery.has_column("study_uid"):
                study = gallery.value("study_uid", gallery.row_of(int(request.case_id)))
            extra = {} if assessment is None else {"density": assessment.audit_fields()}
            self.audit.search(user, request, result, query_study=study, **extra)
        return result

    def _rank(self, finding, request, spec, anchor_set, gallery, query, own_row, top_k):
        """(rows, scores, candidates, standing): the top k of the eligible rows, ranked in this
        process; ``standing`` as SearchResult's (None from an ANN index: not exact)."""
        geometry, features, key = self._features(spec, anchor_set, gallery)
        mask = self._eligible(request, finding, gallery, own_row)
        candidates = int(mask.sum())
        k = min(top_k, candidates)
        if k > 0 and self._ranks_by_index(request, gallery):
            ranked = self._rank_by_index(geometry, features, key, gallery, query, mask, k)
            if ranked is not None:
                return (*ranked, candidates, None)
        rows, scores, standing = self._scan_top_k(geometry, features, query, request, gallery,
                                                  mask, candidates, k)  # fmt: skip
        return rows, scores, candidates, standing

    def ranked_rows(self, request, finding, spec, anchor_set, gallery, k: int):
        """(the top ``k`` eligible rows best first, the eligible mask) for ``request`` over
        ``gallery``: the exact top-k scan a search makes (ties by image id), without every row's
        score (the rank calibration's probes)."""
        query, own_row = self._query_embedding(request, gallery)
        geometry, features, _ = self._features(spec, anchor_set, gallery)
        mask = self._eligible(request, finding, gallery, own_row)
        candidates = int(mask.sum())
        rows, _, _ = self._scan_top_k(geometry, features, query, request, gallery, mask,
                                      candidates, min(int(k), candidates))  # fmt: skip
        return rows, mask

    def _scan_top_k(self, geometry, features, query, request, gallery, mask, candidates, k):
        """(rows, scores, standing): ``rank_exactly`` of the request's query vector over the
        eligible rows (``mask``, ``candidates`` of them), in this process's scan threads."""
        vector, offset = self.query_vector(geometry, features, query, request, gallery)
        threads = self.config.scan_threads or os.cpu_count() or 1
        return rank_exactly(features, vector, offset, mask, candidates, k, gallery.image_ids,
                            threads)  # fmt: skip

    def gallery_scores(self, request: SearchRequest) -> tuple[np.ndarray, np.ndarray]:
        """(scores, eligible) over every gallery row: what ``search`` ranks, before the top-k cut.

        ``eligible`` is False for rows removed by the filters and for the query's own study.
        """
        finding = canonical_finding(request.finding)
        scores, mask, _, _ = self._score_gallery(
            request, finding, parse_geometry(request.geometry), self._gallery_for(request)
        )
        return scores, mask

    def _score_gallery(self, request, finding, spec, gallery, anchor_set=None):
        query, own_row = self._query_embedding(request, gallery)
        if anchor_set is None:
            anchor_set = self.anchors.anchor_set(finding, request.anchor_set)
        geometry, features, _ = self._features(spec, anchor_set, gallery)
        scores = self._scores(geometry, features, query, request, gallery)
        return scores, self._eligible(request, finding, gallery, own_row), query, anchor_set

    def _eligible(self, request, finding, gallery, own_row) -> np.ndarray:
        """Rows that pass the filters, not of the query's own study (an archived case's, or
        ``query_study_uid``), not copies of an uploaded query's pixels (``query_pixel_sha256``)
        and not copies of its content (``query_signature``, see ``copies_of``)."""
        exclusions = self.exclusions(request, gallery, own_row)
        return eligible_mask(gallery, request.filters, finding, exclusions)

    def exclusions(self, request, gallery, own_row) -> Exclusions:
        """What ``request`` never returns besides its filters (see ``_eligible``)."""
        copies = self.copies_of(request, gallery)
        excluded = [*copies, *(i for i in request.exclude_ids if int(i) in gallery)]
        study = None if own_row is None else int(gallery.study_codes[own_row])  # type: ignore[attr-defined]
        return Exclusions(tuple(gallery.row_of(i) for i in excluded), own_row, study,
                          request.query_study_uid, request.query_pixel_sha256)  # fmt: skip

    def copies_of(self, request: SearchRequest, gallery: Gallery | None = None) -> tuple[int, ...]:
        """Image ids of archived copies of an uploaded query by content (re-encoded, resized):
        the two tests of chexretrieve.search.duplicates with SearchConfig's thresholds. Empty
        without ``query_signature``, without a thumbnail reader, or for an archived case."""
        signature = request.query_signature
        if signature is None or self.thumbnails is None or request.case_id is not None:
            return ()
        gallery = gallery or self.gallery
        if request.image_embedding is not None:
            embedding = np.asarray(request.image_embedding, dtype=np.float32).reshape(-1)
        elif request.image is not None:
            embedding = self._encoder("an uploaded image").embed_images([request.image])[0]
        else:
            return ()
        signature = np.asarray(signature, dtype=np.float64).reshape(-1)
        key = (gallery.fingerprint, signature.tobytes(), np.asarray(embedding).tobytes())
        found = self._copies_cache.get(key)
        if found is None:
            config = self.config
            found = find_copies(
                embedding, signature, gallery.embeddings, gallery.image_ids, self.thumbnails,
                config.duplicate_cosine, config.duplicate_correlation, config.duplicate_candidates,
            )  # fmt: skip
            if len(self._copies_cache) >= 32:
                self._copies_cache.pop(next(iter(self._copies_cache)))
            self._copies_cache[key] = found
        return found

    def _ranks_by_index(self, request: SearchRequest, gallery: Gallery) -> bool:
        return (
            self.config.index_kind != "none"
            and len(gallery) >= self.config.index_min_gallery
            and not request.relevant
            and not request.not_relevant
        )

    def _rank_by_index(self, geometry, features, key, gallery, query, mask, k):
        """(rows, their scores), best first, from the ANN index, or None while the index of this
        archive is still being built (the search then ranks exactly: a reload during ingest never
        makes a search wait for a build)."""
        index = self.cache.gallery_index(
            geometry, key, gallery.fingerprint, features.array, self.config.index_kind
        )
        if index is None:
            return None
        with one_blas_thread():
            fq = geometry.features(query[None, :].astype(np.float32))
        found, rows = index.search_features(geometry, fq, k, allowed=mask)
        valid = rows[0] >= 0  # FAISS pads with -1 when it finds fewer than k
        rows, scores = rows[0][valid], found[0][valid].astype(np.float64)
        order = np.lexsort((gallery.image_ids[rows], -scores))
        return rows[order], scores[order]

    def explain(
        self, request: SearchRequest, result_id: int, side: str | None = None
    ) -> Explanation:
        """Explain why ``result_id`` is close to the request's query for its finding, in the
        terms of the request's geometry where its score splits by anchor sentence (softmax: the
        images' softmax weights; Gaussian: each sentence's share of the Mahalanobis distance),
        else by the softmax profile, marked ``approximate``. ``side`` ("left" / "right", the
        query's finding side) leaves out sentences that name only the other side."""
        gallery = self._gallery_for(request, result_id)
        query, _ = self._query_embedding(request, gallery)
        anchor_set = self.anchors.anchor_set(canonical_finding(request.finding), request.anchor_set)
        spec = parse_geometry(request.geometry)
        top = self.config.explanation_anchors
        arguments = (
            query,
            _unit_row(gallery, gallery.row_of(result_id)),
            anchor_set.embeddings,
            anchor_set.sentences,
            self.inv_temperature,
            3 * top if side in ("left", "right") else top,
            anchor_set.polarities or None,
        )
        if spec.kind == "gaussian":  # the posterior's covariance also holds the prior's share
            found = dataclasses.replace(
                explain_gaussian_pair(*arguments), approximate=spec.posterior
            )
        else:
            own = spec.kind == "softmax" and not spec.posterior
            found = dataclasses.replace(explain_pair(*arguments), approximate=not own)
        return without_other_side(found, side, top)

    # ----------------------------------------------------------------------------- helpers
    def _prior_named(self, spec: GeometrySpec) -> tuple:
        """The prior's sets as the result names them (posterior geometries only)."""
        describe = getattr(self.anchors, "prior_description", None)
        return tuple(describe()) if spec.posterior and describe is not None else ()

    def _top_k(self, top_k: int | None) -> int:
        k = self.config.default_top_k if top_k is None else int(top_k)
        if not 1 <= k <= self.config.max_top_k:
            raise ValueError(f"top_k must be between 1 and {self.config.max_top_k}, not {k}")
        return k

    def _query_embedding(
        self, request: SearchRequest, gallery: Gallery
    ) -> tuple[np.ndarray, int | None]:
        given = [
            request.case_id is not None,
            request.image_embedding is not None,
            request.image is not None,
        ]
        if sum(given) != 1:
            raise ValueError("give exactly one query: an archived case id or an uploaded image")
        own_row = None
        if request.case_id is not None:
            own_row = gallery.row_of(request.case_id)
            query = gallery.embedding_rows([own_row])[0].astype(np.float64)
        elif request.image_embedding is not None:
            query = np.asarray(request.image_embedding, dtype=np.float64).reshape(-1)
        else:
            query = self._encoder("an uploaded image").embed_images([request.image])[0]
            query = query.astype(np.float64)
        if query.shape != (gallery.dim,):
            raise ValueError(
                f"query embedding has {query.shape[0]} dimensions but the archive's encoder "
                f"{gallery.encoder_id!r} has {gallery.dim}; embed it with the same encoder"
            )
        if request.text:
            text = self._encoder("free text").embed_texts([request.text])[0].astype(np.float64)
            w = self.config.text_weight
            query = (1.0 - w) * query + w * text
        norm = np.linalg.norm(query)
        if not np.isfinite(norm) or norm == 0:
            raise ValueError("the query embedding is zero or not finite; check the input image")
        return query / norm, own_row

    def _encoder(self, what: str):
        if self.encoder is None:
            raise ValueError(f"searching by {what} needs an encoder; start the service with one")
        return self.encoder

    def fitted_geometry(self, spec: GeometrySpec, anchor_set: AnchorSetRef):
        """(fitted geometry, its key): fitted once per anchor set and geometry (memory cache)."""
        return self.cache.geometry(
            spec,
            anchor_set.embeddings,
            anchor_set.content_hash,
            self.inv_temperature,
            self.anchors.broad_prior if spec.posterior else None,
            self.config.fit_seed,
        )

    def _features(self, spec: GeometrySpec, anchor_set: AnchorSetRef, gallery: Gallery):
        """(geometry, gallery features, key): from the archive index when it holds them (it may
        raise FeaturesBeingPrepared while it builds them), else computed and cached here."""
        geometry, key = self.fitted_geometry(spec, anchor_set)
        if self.index is not None:
            features = self.index.features(gallery, geometry, key, spec, anchor_set)
            if features is not None:
                return geometry, features, key
        features = self.cache.gallery_features(
            geometry,
            key,
            gallery.fingerprint,
            gallery.embeddings,
            image_ids=gallery.image_ids,
            context={"encoder": gallery.encoder_id},
        )
        return geometry, features, key

    def _scores(self, geometry, features, query, request: SearchRequest, gallery: Gallery):
        vector, offset = self.query_vector(geometry, features, query, request, gallery)
        return features.inner_products(vector).astype(np.float64) + offset

    def query_vector(self, geometry, features, query, request, gallery):
        """(vector, offset): every gallery row scores vector · f_k + offset. Relevance feedback is
        folded in (each geometry's score is linear in the query vector, so the mean score of the
        marked rows is the score of their mean query vector): one scan ranks it."""
        with one_blas_thread():  # small products; leave the second core to the scan
            fq = geometry.features(query[None, :].astype(np.float32))
            vector = geometry.query_vectors(fq)[0].astype(np.float64)
            offset = float(geometry.query_offsets(fq)[0])
            for ids, weight in (
                (request.relevant, self.config.feedback_relevant_weight),
                (request.not_relevant, -self.config.feedback_irrelevant_weight),
            ):
                if ids:
                    fr = features.rows([gallery.row_of(i) for i in ids])
                    vector += weight * geometry.query_vectors(fr).astype(np.float64).mean(axis=0)
                    offset += weight * float(geometry.query_offsets(fr).astype(np.float64).mean())
        return vector, offset

    def _hits(self, rows, scores, gallery, query, anchor_set, explain) -> tuple[SearchHit, ...]:
        columns = gallery.columns  # type: ignore[attr-defined]
        metadata = columns.records("metadata", rows)  # = metadata.iloc[rows].to_dict("records")
        labels = columns.records("labels", rows)
        hits = []
        for rank, (row, score) in enumerate(zip(rows, scores, strict=True), start=1):
            explanation = None
            if explain:
                explanation = explain_pair(
                    query,
                    _unit_row(gallery, row),
                    anchor_set.embeddings,
                    anchor_set.sentences,
                    self.inv_temperature,
                    self.config.explanation_anchors,
                    anchor_set.polarities or None,
                )
            hits.append(
                SearchHit(
                    rank=rank,
                    image_id=int(gallery.image_ids[row]),
                    score=float(score),
                    metadata=metadata[rank - 1],
                    labels={k: _label(v) for k, v in labels[rank - 1].items()},
                    explanation=explanation,
                )
            )
        return tuple(hits)


def _unit_row(gallery: Gallery, row: int) -> np.ndarray:
    """A gallery embedding as a float64 unit vector (float16 storage rounds it off the sphere)."""
    vector = gallery.embedding_rows([row])[0].astype(np.float64)
    return vector / np.linalg.norm(vector)


def _label(value) -> float | None:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else float(value)


def top_ids(result: SearchResult) -> Sequence[int]:
    return [h.image_id for h in result.hits]
