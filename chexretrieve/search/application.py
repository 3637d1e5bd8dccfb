"""Wiring for the application: a SearchService over a store, an encoder and the anchor files."""

from __future__ import annotations

from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store


def open_search_service(
    db_url: str | None, encoder_spec: str, config: SearchConfig | None = None, store=None
) -> SearchService:
    """Open the store, load the encoder, and build the service (gallery loaded lazily)."""
    from chexretrieve.encoders import load_encoder
    from chexretrieve.store import open_store

    store = store or open_store(db_url)
    encoder = load_encoder(encoder_spec)
    if store.encoder(encoder.encoder_id) is None:
        known = ", ".join(e.encoder_id for e in store.encoders()) or "none"
        raise ValueError(
            f"the archive holds no embeddings of encoder {encoder.encoder_id!r} (stored: {known}); "
            "ingest with that encoder first (`chexretrieve ingest ... --encoder SPEC`)"
        )
    return SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        StoreAnchorProvider(store, encoder),
        encoder=encoder,
        config=config,
    )
