"""Nearest-neighbour search over gallery features (FAISS): exact, HNSW and IVF indexes.

``build_index(geometry, features, kind="hnsw")`` returns a ``GalleryIndex`` whose
``search(geometry.query_vectors(fq), k)`` ranks the gallery by the geometry's score (the per-query
offset aside, which never changes a ranking); see ``chexretrieve.ann.index`` for how each layout
maps onto FAISS. Only this package imports FAISS.
"""

from chexretrieve.ann.config import INDEX_KINDS, AnnConfig
from chexretrieve.ann.index import (
    BuildStats,
    GalleryIndex,
    build_index,
    exact_top_k,
    recall_at_k,
    tune_search_effort,
)

__all__ = [
    "INDEX_KINDS",
    "AnnConfig",
    "BuildStats",
    "GalleryIndex",
    "build_index",
    "exact_top_k",
    "recall_at_k",
    "tune_search_effort",
]
