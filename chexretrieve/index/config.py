"""Settings of the archive index (``chexretrieve.index``): where it lives and what it holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chexretrieve.findings import canonical_finding

#: the environment variable naming the index folder of non-SQLite stores (see paths)
INDEX_ENV = "CHEXRETRIEVE_INDEX"

#: what is verified when an index generation is opened (see chexretrieve.index.rowfile)
VERIFY_MODES = ("read", "all")


@dataclass(frozen=True)
class IndexConfig:
    # search galleries read from the archive index (False: read from the store, as before)
    enabled: bool = True
    # folder of the archive index; None = beside a SQLite store (<file name>.index/), else
    # $CHEXRETRIEVE_INDEX, else index/ under the cache root (one sub-folder per store)
    folder: Path | None = None
    # dtype of the stored feature matrices: "float16" (half the bytes scanned and mapped; scores
    # accumulate in float32) or "float32" (exactly the in-memory search's features)
    feature_dtype: str = "float16"
    # geometry every finding is indexed under at build time (the case lookup's default)
    default_geometry: str = "softmax"
    # "Finding=geometry" pairs: a finding indexed under another default geometry
    finding_geometries: tuple[str, ...] = ()
    # further geometries indexed for every finding at build time; any other (finding, geometry)
    # is built on first use (a background job in `serve`)
    geometries: tuple[str, ...] = ()
    # results per ranking whose rank calibration is measured at build time (the case lookup
    # shows 12); another top k is measured on first use, in the background
    calibration_top_k: tuple[int, ...] = (12,)
    # an archive that grew by more than this fraction since a calibration was measured gets it
    # measured again at the next update (labels that changed always do)
    recalibrate_fraction: float = 0.05
    # fit the archive density (OOD flag, rarity, concepts) at build time
    density: bool = True
    # archive rows read from the store per chunk (a build resumes from its last chunk)
    chunk_rows: int = 50_000
    # what opening a generation verifies against its seal: "read" = every block a request reads,
    # on first read (a cold search costs what it reads); "all" = every file, at open
    verify: str = "read"
    # a missing (finding, geometry) of an archive up to this many images is built during the
    # request; larger ones in a background job of `serve` ("being prepared (n %)")
    prepare_in_request_below: int = 50_000

    def __post_init__(self) -> None:
        if self.feature_dtype not in ("float16", "float32"):
            raise ValueError(
                f"unknown feature dtype {self.feature_dtype!r}; choose float16 or float32"
            )
        if self.verify not in VERIFY_MODES:
            raise ValueError(
                f"verify must be one of {', '.join(VERIFY_MODES)}, not {self.verify!r}"
            )
        if self.chunk_rows < 1000:
            raise ValueError(f"chunk_rows must be at least 1000, got {self.chunk_rows}")
        if not self.calibration_top_k or min(self.calibration_top_k) < 1:
            raise ValueError(f"calibration_top_k must be positive, got {self.calibration_top_k}")
        if not 0 <= self.recalibrate_fraction <= 1:
            raise ValueError(
                f"recalibrate_fraction must be in [0, 1], got {self.recalibrate_fraction}"
            )
        for pair in self.finding_geometries:
            finding, equals, geometry = pair.partition("=")
            if not equals or not geometry.strip():
                raise ValueError(f"finding_geometries takes Finding=geometry, not {pair!r}")
            canonical_finding(finding)

    def default_geometry_of(self, finding: str) -> str:
        """The geometry ``finding`` is indexed under by default."""
        name = canonical_finding(finding)
        for pair in self.finding_geometries:
            other, _, geometry = pair.partition("=")
            if canonical_finding(other) == name:
                return geometry.strip()
        return self.default_geometry

    def geometries_of(self, finding: str) -> tuple[str, ...]:
        """Every geometry ``finding`` is indexed under at build time, default first."""
        first = self.default_geometry_of(finding)
        return (first, *(g for g in self.geometries if g != first))
