"""What the search service gets from the index besides features: anchor sets served per
finding, and the archive density stored in the index."""

from __future__ import annotations

import threading
from dataclasses import replace

from chexretrieve.density.provider import ArchiveDensityProvider
from chexretrieve.index.density import load_density


class IndexAnchors:
    """An anchor provider whose default set of a finding (``key`` None) is the version the
    index serves it with: after a curator publishes a version, the old one keeps serving until
    the index has built the new one, then every search switches at once. Everything else is the
    wrapped provider's."""

    def __init__(self, provider, index):
        self._provider = provider
        self._index = index

    def anchor_set(self, finding: str, key: str | None):
        if key is None:
            from chexretrieve.findings import canonical_finding

            serving = self._index.serving_key(canonical_finding(finding))
            if serving is not None:
                try:
                    return self._provider.anchor_set(finding, serving)
                except ValueError:  # the served version's file is gone: the latest then
                    pass
        return self._provider.anchor_set(finding, key)

    def broad_prior(self):
        return self._provider.broad_prior()

    def __getattr__(self, name: str):
        return getattr(self._provider, name)


class IndexDensityProvider(ArchiveDensityProvider):
    """The archive density stored in the index (fitted at build time, every row scored), for
    galleries read from the index; another gallery is served as ``ArchiveDensityProvider``
    serves it."""

    def __init__(self, store, encoder_id, config=None, anchors=None):
        super().__init__(store, encoder_id, config, anchors)
        self._loaded: dict[str, object] = {}
        self._load_lock = threading.Lock()

    def usable(self, gallery):
        manifest = getattr(gallery, "manifest", None)
        record = None if manifest is None else manifest.content.get("density")
        if record is None or int(record["scored_rows"]) != len(gallery):
            return super().usable(gallery)
        with self._load_lock:
            density = self._loaded.get(record["sha256"])
            if density is None:
                try:
                    density = load_density(manifest.folder, record)
                except (ValueError, OSError) as exc:
                    # never served: the store's own fit (refitted if need be) answers meanwhile
                    fit, stale, note = super().usable(gallery)
                    said = (
                        f"the archive index's density file is damaged ({exc}); not used, "
                        "refitted by the next `chexretrieve index build` or ingest"
                    )
                    return fit, stale, said + (f"; {note}" if note else "")
                self._loaded = {record["sha256"]: density}
        with self._lock:
            self._current = density
        fitted = int(record["fitted_rows"])
        if fitted >= len(gallery):
            return density, False, ""
        note = (
            f"density fitted on {fitted:,} images; the {len(gallery) - fitted:,} archived since "
            f"are scored by that fit (refitted once more than "
            f"{100 * self.config.refit_fraction:.0f} % of the archive is new)"
        )
        return density, True, note

    def with_concepts(self, hits, gallery):
        density = self.held()
        if density is None or not hasattr(gallery, "embedding_rows"):
            return super().with_concepts(hits, gallery)
        rows = gallery.embedding_rows([gallery.row_of(hit.image_id) for hit in hits])
        shares = self.concepts(density, rows)
        return tuple(replace(hit, concepts=c) for hit, c in zip(hits, shares, strict=True))
