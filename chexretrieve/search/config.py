"""Settings of the search service (built by the CLI and the UI; never from CLI namespaces)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: where searches rank (ShardedSearchConfig.backend)
SEARCH_BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class ShardedSearchConfig:
    # where a search ranks the archive: "local" = this process scans the archive index; "ray" =
    # actors on a Ray cluster, each holding one contiguous row range (shard) of the index by
    # memory map, rank their shard and the top k are merged here (chexretrieve.distributed)
    backend: str = "local"
    # Ray cluster to join ("HOST:PORT" of a head, or "ray://HOST:10001"); None = $RAY_ADDRESS,
    # else a Ray instance started in this process (one machine)
    ray_address: str | None = None
    # shards (one actor each) the index's rows are split into
    shards: int = 4
    # "" = Ray places the actors; else shard k runs on a node that offers the custom resource
    # f"{pin_resource}{k}" (`ray start --resources='{"shard1": 1}'`), one node per shard
    pin_resource: str = ""
    # seconds the driver waits for every shard's answer before the search fails
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.backend not in SEARCH_BACKENDS:
            raise ValueError(
                f"unknown search backend {self.backend!r}; choose one of: "
                f"{', '.join(SEARCH_BACKENDS)}"
            )
        if self.shards < 1:
            raise ValueError(f"shards must be at least 1, got {self.shards}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")


@dataclass(frozen=True)
class SearchConfig:
    # results returned when a request does not say
    default_top_k: int = 10
    # the most results one request may ask for
    max_top_k: int = 200
    # folder for persisted gallery features; None = features/ under the cache root
    # ($CHEXRETRIEVE_CACHE, else $XDG_CACHE_HOME/chexretrieve, see chexretrieve.cache)
    feature_cache_dir: Path | None = None
    # gallery feature blocks kept in memory (least recently used dropped; they reload from disk);
    # fitted geometries, small but slow to refit, get FeatureCache.GEOMETRIES_PER_ENTRY x as many
    memory_cache_entries: int = 16
    # seed for the geometries that are fitted by EM (gmm, movmf)
    fit_seed: int = 0
    # composite query: weight of the free-text embedding mixed into the image embedding (0..1)
    text_weight: float = 0.3
    # relevance feedback: weight of the mean similarity to results marked relevant
    feedback_relevant_weight: float = 0.75
    # relevance feedback: weight of the mean similarity to results marked not relevant
    feedback_irrelevant_weight: float = 0.25
    # explanation: anchor sentences listed per result
    explanation_anchors: int = 5
    # ranking of large galleries: "none" = the exact matrix product over every row; "exact",
    # "hnsw" or "ivf" = a chexretrieve.ann index per geometry and archive (AnnConfig defaults),
    # built in the background after the first search that needs it (exact ranking until then);
    # relevance-feedback searches always rank exactly
    index_kind: str = "none"
    # galleries with fewer rows than this are ranked exactly even when index_kind is set
    index_min_gallery: int = 500_000
    # ANN indexes kept in memory (least recently used dropped and rebuilt when needed again);
    # an HNSW index over a million images holds about 0.7 GB
    index_cache_entries: int = 4
    # dtype the service holds gallery embeddings and gallery features in (memory and feature
    # cache files): "float32", or "float16" (half the memory and bytes scanned per search; scores
    # still accumulate in float32; ranking change measured in README "Storage precision")
    storage_dtype: str = "float32"
    # threads one exact search scans the gallery with (contiguous row ranges of at least 48 MiB,
    # one core each, merged: the same top k); 0 = one per CPU core
    scan_threads: int = 0
    # copies of an uploaded query (chexretrieve.search.duplicates): archived images whose embedding
    # cosine with the upload's is at least this are checked by content (1.0 = never checked)
    duplicate_cosine: float = 0.9
    # ... and are copies, never results, when their thumbnail's content signature correlates with
    # the upload's at least this much (copies measured >= 0.998, distinct phantoms <= 0.941)
    duplicate_correlation: float = 0.98
    # ... the most candidates (closest by cosine) checked by content per upload
    duplicate_candidates: int = 64
    # labelled archived images searched to measure, per geometry and finding, the chance that a
    # result at each rank shares the query's finding status (chexretrieve.search.calibration)
    calibration_queries: int = 200
    # where searches rank: this process, or shards of the archive index on a Ray cluster
    # (ShardedSearchConfig.* rows)
    sharding: ShardedSearchConfig = field(default_factory=ShardedSearchConfig)

    def __post_init__(self) -> None:
        if self.storage_dtype not in ("float32", "float16"):
            raise ValueError(
                f"unknown storage dtype {self.storage_dtype!r}; choose one of: float32, float16"
            )
        kinds = ("none", "exact", "hnsw", "ivf")
        if self.index_kind not in kinds:
            raise ValueError(
                f"unknown index kind {self.index_kind!r}; choose one of: {', '.join(kinds)}"
            )
        for name in ("duplicate_cosine", "duplicate_correlation"):
            if not -1.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} is a cosine between -1 and 1, got {getattr(self, name)}")
        if self.duplicate_candidates < 0:
            raise ValueError(
                f"duplicate_candidates must be 0 or positive, got {self.duplicate_candidates}"
            )
        if self.scan_threads < 0:
            raise ValueError(f"scan_threads must be 0 or positive, got {self.scan_threads}")
        if self.index_cache_entries < 1:
            raise ValueError(
                f"index_cache_entries must be at least 1, got {self.index_cache_entries}"
            )
        if self.index_min_gallery < 0:
            raise ValueError(
                f"index_min_gallery must be 0 or positive, got {self.index_min_gallery}"
            )
