"""``open_search_app``: the one place wiring a store, an encoder, anchors and the audit trail."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from chexretrieve.app.config import AppConfig
from chexretrieve.app.stores import resolve_read_store
from chexretrieve.search.service import SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store

logger = logging.getLogger(__name__)


class ArchiveEmptyError(ValueError):
    """The store holds no embeddings of the encoder yet (a fresh database before any ingest).

    Carries the open ``store`` and the loaded ``encoder``, so that a caller that can wait (the UI,
    :mod:`chexretrieve.ui.waiting`) polls the store and builds the app once cases arrive without
    opening or loading them again.
    """

    def __init__(self, message: str, store: Any, encoder: Any) -> None:
        super().__init__(message)
        self.store = store
        self.encoder = encoder


@dataclass
class SearchApp:
    """The objects every searching entry point shares, built once by :func:`open_search_app`."""

    config: AppConfig
    store: Any  # chexretrieve.store.Store
    encoder: Any  # chexretrieve.encoders.Encoder
    anchors: StoreAnchorProvider
    audit: Any  # chexretrieve.audit.AuditLog, or None when AuditConfig.enabled is False
    service: SearchService


def archive_has_embeddings(store: Any, encoder_id: str) -> bool:
    """Whether ``store`` holds at least one embedding of ``encoder_id`` (an encoder registered by
    an ingest that has not stored an image yet counts as none)."""
    return store.encoder(encoder_id) is not None and store.count_embeddings(encoder_id) > 0


def store_witness(store: Any):  # noqa: ANN201
    """Where the audit trail's length is recorded after each record: the store searched (its
    own connection, as the search's is read-only; chexretrieve.audit.anchor), or None for a
    store without a URL (a test's fake)."""
    from chexretrieve.audit.anchor import StoreWitness
    from chexretrieve.store.audit_anchor import AuditAnchorTable

    url = getattr(getattr(store, "config", None), "url", None)
    return StoreWitness(AuditAnchorTable(url)) if url else None


def load_app_encoder(spec: str, device: str = "auto"):  # noqa: ANN201
    """The encoder named by ``spec`` (EncoderError / ValueError with what to change)."""
    from chexretrieve.encoders.registry import load_encoder

    return load_encoder(spec, device)


def open_search_app(
    config: AppConfig | None = None,
    *,
    store: Any = None,
    encoder: Any = None,
    background: bool = False,
    progress: Any = None,
) -> SearchApp:
    """Open (never create) the store, load the encoder, open the audit trail, build the service.

    ``store`` / ``encoder``: already open ones to use instead of ``config.db_url`` /
    ``config.encoder`` (the demo passes the store it just ingested into, tests their stand-in
    encoder). ArchiveEmptyError (a ValueError) when the store lacks the encoder's embeddings.
    With ``config.index.enabled`` the gallery is the archive index's (built or brought up to
    date first when its folder is writable; ``progress(what, done, total)`` hears how far);
    ``background``: what the index lacks is prepared by background jobs (`serve`), not during
    the call.
    """
    from chexretrieve.audit import open_audit_log
    from chexretrieve.store import StoreConfig, open_store

    config = config or AppConfig()
    if store is None:
        url = resolve_read_store(config.db_url)
        # a read command: never created, never migrated, never written
        store = open_store(config=StoreConfig(url=url, create_if_missing=False, read_only=True))
    if encoder is None:
        encoder = load_app_encoder(config.encoder, config.device)
    if not archive_has_embeddings(store, encoder.encoder_id):
        known = ", ".join(e.encoder_id for e in store.encoders()) or "none"
        raise ArchiveEmptyError(
            f"the archive {store.label} holds no embeddings of encoder {encoder.encoder_id!r} "
            f"(stored: {known}); ingest with that encoder first "
            "(`chexretrieve ingest FOLDER --db URL --encoder SPEC`) or pass its --encoder",
            store,
            encoder,
        )
    audit = open_audit_log(config.audit, anchor=store_witness(store))
    anchors = StoreAnchorProvider(store, encoder, config.anchors_dir, prior=config.prior)
    index = open_index(config, store, encoder.encoder_id, anchors, background, progress)
    shards = None
    if config.search.sharding.backend == "ray":
        from chexretrieve.distributed import ray_search_backend

        shards = ray_search_backend(index, config.search)
    if index is not None:
        from chexretrieve.index.services import IndexAnchors, IndexDensityProvider

        anchors = IndexAnchors(anchors, index)
        density = None
        if config.density.enabled:
            density = IndexDensityProvider(store, encoder.encoder_id, config.density, anchors)
        service = SearchService(index.gallery, anchors, encoder=encoder, config=config.search,
                                audit=audit, revision=index.revision_token, density=density,
                                thumbnails=store.read_thumbnails, index=index,
                                shards=shards)  # fmt: skip
        if background:  # `serve`: what a first search reads is opened before it comes
            threading.Thread(target=open_before_first_search, args=(service,), daemon=True,
                             name="chexretrieve-first-search").start()  # fmt: skip
        return SearchApp(config, store, encoder, anchors, audit, service)
    density = None
    if config.density.enabled:
        from chexretrieve.density import ArchiveDensityProvider

        density = ArchiveDensityProvider(store, encoder.encoder_id, config.density, anchors)
    service = SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        anchors,
        encoder=encoder,
        config=config.search,
        audit=audit,
        revision=store.archive_revision,
        density=density,
        thumbnails=store.read_thumbnails,
    )
    return SearchApp(config, store, encoder, anchors, audit, service)


def open_before_first_search(service: SearchService) -> None:
    """Open the index's gallery (its small files verified; the large ones are then verified in
    the index's own background thread) and load its archive density (sealed file checked), so a
    server's first search does not do it. A search arriving meanwhile waits on the same locks;
    a failure here is the first search's to report."""
    try:
        gallery = service.gallery
        if service.density is not None:
            service.density.usable(gallery)
    except Exception as exc:  # noqa: BLE001 - the first search meets it again and says it
        logger.warning("opening the archive index before the first search: %s", exc)


def open_index(config: AppConfig, store, encoder_id: str, anchors, background: bool, progress):  # noqa: ANN001, ANN201
    """The archive index of ``store`` (built or updated first when its folder is writable), or
    None when it is turned off or cannot be read or built here (the store's gallery then)."""
    if not config.index.enabled:
        return None
    from chexretrieve.index import ArchiveIndex, IndexUnavailable, index_folder

    folder = index_folder(store, encoder_id, config.index)
    index = ArchiveIndex(folder, store, encoder_id, anchors, config.index, config.search,
                         config.density, background=background)  # fmt: skip
    try:
        manifest = index.open(build=True, progress=progress)
    except (IndexUnavailable, OSError) as exc:
        logger.warning("the archive index %s cannot be used (%s); the gallery is read from "
                       "the store", folder, exc)  # fmt: skip
        return None
    if manifest is None or manifest.rows == 0:
        logger.warning("no archive index in %s (not writable here: run `chexretrieve index "
                       "build`); the gallery is read from the store", folder)  # fmt: skip
        return None
    return index
