"""The search service's measured chance beside each rank (``rank_calibration``) and the query's
nearest archived neighbour by cosine (``nearest_cosine``), split out of chexretrieve.search.service:
a base class of ``SearchService``, which supplies the gallery, anchors, index, config and scoring
it reads (``ranked_rows``, ``fitted_geometry``, ``_eligible``, ``_query_embedding``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from chexretrieve.findings import canonical_finding
from chexretrieve.search.features import parse_geometry
from chexretrieve.search.gallery import SearchFilters
from chexretrieve.search.requests import SearchRequest
from chexretrieve.search.scoring import KeyMatrix


class CalibrationMixin:
    """``rank_calibration`` and ``nearest_cosine`` of SearchService (not used alone)."""

    def rank_calibration(self, request: SearchRequest, top_k: int):
        """The chance, at ranks 1..top_k, that a result shares the query's finding status under
        the request's geometry, anchor set and finding, measured on the labelled archive (see
        chexretrieve.search.calibration): as the archive index stored it at ingest, else
        measured here once per archive. None without enough labels (or, with an index, while
        it is measured in the background)."""
        if self.index is not None:
            finding = canonical_finding(request.finding)
            anchor_set = self.anchors.anchor_set(finding, request.anchor_set)
            spec = parse_geometry(request.geometry)
            gallery = self.gallery
            geometry, key = self.fitted_geometry(spec, anchor_set)
            known, found = self.index.calibration(gallery, geometry, key, spec, anchor_set,
                                                  finding, int(top_k))  # fmt: skip
            if known:
                return found
        return self.measure_calibration(request, top_k)

    def measure_calibration(self, request: SearchRequest, top_k: int, nearest=None):
        """``rank_calibration`` measured now on the current gallery (cached per archive).
        ``nearest``: {row: its highest cosine with a row of another study} already computed
        for some rows (the archive index computes the sampled rows' in one pass)."""
        from chexretrieve.search.calibration import calibrate

        gallery = self.gallery
        finding = canonical_finding(request.finding)
        anchor_key = self.anchors.anchor_set(finding, request.anchor_set).key
        key = (gallery.fingerprint, request.geometry, anchor_key, finding, int(top_k))
        cache = self._calibrations
        if key not in cache:
            for stale in [k for k in list(cache) if k[0] != gallery.fingerprint]:
                cache.pop(stale, None)  # an older archive's (list(): other threads may add)
            labels = gallery.label_values(finding)
            if labels is None:
                return None

            spec = parse_geometry(request.geometry)
            anchor_set = self.anchors.anchor_set(finding, anchor_key)

            def ranked_of(image_id: int, k: int):
                # every probe against the gallery the labels and embeddings below come from: an
                # ingest during the calibration must not hand back a longer gallery's ranking
                probe = SearchRequest(finding=finding, geometry=request.geometry,
                                      case_id=image_id, anchor_set=anchor_key)  # fmt: skip
                return self.ranked_rows(probe, finding, spec, gallery=gallery, k=k,
                                        anchor_set=anchor_set)  # fmt: skip

            keys = embedding_keys(gallery)

            def nearest_of(row: int, eligible) -> float:
                if nearest is not None and row in nearest:
                    return nearest[row]
                found, _ = keys.top_k(keys.rows([row])[0], 1, eligible)
                return float(found[0]) if len(found) else float("nan")

            cache[key] = calibrate(
                None, gallery.image_ids, labels, None, int(top_k),
                self.config.calibration_queries, self.config.fit_seed, nearest_of=nearest_of,
                ranked_of=ranked_of,
            )  # fmt: skip
        return cache[key]

    def nearest_cosine(self, request: SearchRequest) -> float:
        """The query's highest cosine with an archived image other than its own study (kept
        for the last queries: a query searched again under another finding scans nothing)."""
        gallery = self._gallery_for(request)
        embedding = request.image_embedding
        key = (gallery.fingerprint, request.case_id, request.query_study_uid,
               None if embedding is None else np.asarray(embedding).tobytes(),
               request.query_pixel_sha256, request.exclude_ids)  # fmt: skip
        with self._gallery_lock:
            if request.image is None and key in self._nearest:
                return self._nearest[key]
        try:
            value = self._nearest_cosine(request, gallery)
        except _NotYet:
            return float("nan")
        if request.image is None:
            with self._gallery_lock:
                if len(self._nearest) >= 64:
                    self._nearest.pop(next(iter(self._nearest)))
                self._nearest[key] = value
        return value

    def _nearest_cosine(self, request: SearchRequest, gallery) -> float:
        if not getattr(gallery, "embeddings_ready", lambda: True)():
            # an index whose embeddings are still being verified in the background: the note
            # this value feeds is left out rather than a search waiting seconds for it
            raise _NotYet
        query, own_row = self._query_embedding(dataclasses.replace(request, text=None), gallery)
        mask = self._eligible(dataclasses.replace(request, filters=SearchFilters()),
                              canonical_finding(request.finding), gallery, own_row)  # fmt: skip
        if not mask.any():
            return float("nan")
        found, _ = embedding_keys(gallery).top_k(query.astype(np.float32), 1, mask)
        return float(found[0])


class _NotYet(Exception):
    """A value that needs files still being verified (not remembered; asked again later)."""


def embedding_keys(gallery) -> KeyMatrix:
    """The gallery's embeddings as a KeyMatrix (an index's mapped file, or the rows the service
    stored), for nearest-neighbour scans by cosine."""
    return gallery.embedding_keys()
