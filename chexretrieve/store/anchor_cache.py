"""The Store's anchor-embedding cache: the text embeddings of one anchor-set version under one
encoder, keyed by (set id, version, content hash, encoder id) (a mixin of ``Store``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import delete, insert, select

from chexretrieve.store import writes
from chexretrieve.store.queries import anchor_key, select_frame
from chexretrieve.store.records import bytes_to_matrix, matrix_to_bytes
from chexretrieve.store.schema import AnchorEmbedding


class AnchorEmbeddingCache:
    """The Store's anchor-embedding methods (a mixin: it uses ``Store._read`` / ``_write`` and
    ``_require_encoder``)."""

    def put_anchor_embeddings(
        self,
        anchor_set_id: str,
        version: str,
        content_hash: str,
        encoder_id: str,
        matrix: np.ndarray,
    ) -> None:
        """Cache the (n_sentences, d) text embeddings of one anchor-set version (replaces)."""
        encoder = self._require_encoder(encoder_id)
        blob, rows, dim = matrix_to_bytes(matrix)
        if dim != encoder.embed_dim:
            raise ValueError(
                f"anchor embeddings have dimension {dim}; encoder {encoder_id} has "
                f"{encoder.embed_dim}"
            )
        key = anchor_key(anchor_set_id, str(version), content_hash, encoder_id)
        with self._write() as conn:
            conn.execute(delete(AnchorEmbedding).where(key))
            conn.execute(
                insert(AnchorEmbedding).values(
                    anchor_set_id=anchor_set_id,
                    version=str(version),
                    content_hash=content_hash,
                    encoder_id=encoder_id,
                    n_sentences=rows,
                    dim=dim,
                    matrix=blob,
                    created_at=writes.utc_now(),
                )
            )

    def get_anchor_embeddings(
        self, anchor_set_id: str, version: str, content_hash: str, encoder_id: str
    ) -> np.ndarray | None:
        """The cached matrix, or None when this exact (set, version, content, encoder) is absent."""
        key = anchor_key(anchor_set_id, str(version), content_hash, encoder_id)
        with self._read() as conn:
            row = conn.execute(
                select(
                    AnchorEmbedding.n_sentences, AnchorEmbedding.dim, AnchorEmbedding.matrix
                ).where(key)
            ).first()
        if row is None:
            return None
        return bytes_to_matrix(row.matrix, row.n_sentences, row.dim)

    def anchor_embeddings_frame(self) -> pd.DataFrame:
        """One row per cached anchor matrix (no matrices): set id, version, hash, encoder, n, d."""
        stmt = select(
            AnchorEmbedding.anchor_set_id,
            AnchorEmbedding.version,
            AnchorEmbedding.content_hash,
            AnchorEmbedding.encoder_id,
            AnchorEmbedding.n_sentences,
            AnchorEmbedding.dim,
            AnchorEmbedding.created_at,
        ).order_by(AnchorEmbedding.anchor_set_id, AnchorEmbedding.version)
        with self._read() as conn:
            return select_frame(conn, stmt)
