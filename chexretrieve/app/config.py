"""Settings of the composition root (what every searching entry point opens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chexretrieve.audit.config import AuditConfig
from chexretrieve.density.config import DensityConfig
from chexretrieve.index.config import IndexConfig
from chexretrieve.search.config import SearchConfig


@dataclass(frozen=True)
class AppConfig:
    # store to search: a SQLAlchemy URL; None = $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite when
    # it exists, else the demo store data/demo/chexretrieve.sqlite when it exists (never created)
    db_url: str | None = None
    # encoder spec the archive was ingested with (phantom, chexzero:FILE, hf-clip:DIR)
    encoder: str = "phantom"
    # where the encoder runs: auto, cpu, cuda, cuda:N
    device: str = "auto"
    # anchor-set folder; None = $CHEXRETRIEVE_ANCHORS, else the repository's anchors/
    anchors_dir: Path | None = None
    # private broad sets (id@version or id) that join the posterior prior besides those imported
    # from this store's own reports (`--prior`; see chexretrieve.anchors.broad_prior)
    prior: tuple[str, ...] = ()
    # settings of the search service (feature cache folder, ranking index, feedback weights, ...)
    search: SearchConfig = field(default_factory=SearchConfig)
    # the audit trail every search is written to (AuditConfig.path / $CHEXRETRIEVE_AUDIT_LOG)
    audit: AuditConfig = field(default_factory=AuditConfig)
    # the archive density every search is assessed by (OOD flag, rarity; DensityConfig.* rows)
    density: DensityConfig = field(default_factory=DensityConfig)
    # the archive index searches read the gallery, features and calibrations from (IndexConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
