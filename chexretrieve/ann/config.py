"""Settings of the nearest-neighbour index over gallery features (``chexretrieve.ann``)."""

from __future__ import annotations

from dataclasses import dataclass

#: index kinds ``build_index`` accepts
INDEX_KINDS = ("exact", "hnsw", "ivf")


@dataclass(frozen=True)
class AnnConfig:
    # "exact" (FAISS flat inner product: the same ranking as the matmul), "hnsw" or "ivf"
    kind: str = "exact"
    # HNSW: graph neighbours per node (more: better recall, more memory and build time)
    hnsw_m: int = 32
    # HNSW: candidate list length while building (more: better graph, slower build)
    ef_construction: int = 80
    # HNSW efSearch / IVF nprobe; 0 = tuned at build time until target_recall is reached
    search_effort: int = 0
    # recall@tune_k against the exact index that tuning aims for on sampled gallery queries
    target_recall: float = 0.97
    # the tuned effort is multiplied by this: gallery rows are easier queries than unseen images
    effort_margin: float = 2.0
    # neighbours compared when tuning the search effort
    tune_k: int = 10
    # gallery rows used as tuning queries (their own row excluded from both lists)
    tune_queries: int = 200
    # IVF: number of k-means cells; 0 = 4 x sqrt(gallery size), at most gallery size / 39
    ivf_lists: int = 0
    # a filter admitting at most this many rows is searched exactly (graph and inverted-list
    # searches lose recall, or miss rows, under very selective filters)
    exact_filter_rows: int = 20000
    # FAISS threads (build and search); 0 = FAISS's default (all cores)
    threads: int = 0
    # seed of the tuning sample and of IVF's k-means
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise ValueError(
                f"unknown index kind {self.kind!r}; choose one of: {', '.join(INDEX_KINDS)}"
            )
        for name in ("hnsw_m", "ef_construction", "tune_k", "tune_queries"):
            if getattr(self, name) < 1:
                raise ValueError(f"AnnConfig.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("search_effort", "ivf_lists", "threads", "exact_filter_rows"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"AnnConfig.{name} must be 0 or positive, got {getattr(self, name)}"
                )
        if self.effort_margin < 1.0:
            raise ValueError(
                f"AnnConfig.effort_margin must be at least 1, got {self.effort_margin}"
            )
        if not 0.0 < self.target_recall <= 1.0:
            raise ValueError(
                f"AnnConfig.target_recall must lie in (0, 1], got {self.target_recall}"
            )
