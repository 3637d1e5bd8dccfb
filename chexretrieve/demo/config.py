"""Settings of `chexretrieve demo` (what `make demo` runs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DemoConfig:
    # folder holding the demo's phantom archive, database and caches (reused by later runs)
    data_dir: Path = Path("data/demo")
    # phantom images generated on the first run
    n_images: int = 3000
    # seed of the phantom archive
    seed: int = 0
    # encoder spec used to embed the archive
    encoder: str = "phantom"
    # open the case-lookup UI at the end (False: print one example search instead)
    serve: bool = True
    # address the UI binds to (loopback by default)
    host: str = "127.0.0.1"
    # port the UI listens on
    port: int = 7860
    # a first run opens the page once this many phantoms are stored; the rest of the archive is
    # generated and ingested while the page is up (its searches see each new part)
    first_page_images: int = 300
    # phantoms ingested per part after the first (a part is ingested while the next is generated)
    part_images: int = 450

    def __post_init__(self) -> None:
        if self.n_images < 20:
            raise ValueError(f"the demo needs at least 20 images, got {self.n_images}")
        if self.first_page_images < 20 or self.part_images < 1:
            raise ValueError(
                "the page needs at least 20 stored images and a part at least one, got "
                f"{self.first_page_images} and {self.part_images}"
            )
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be between 1 and 65535, got {self.port}")

    @property
    def archive_dir(self) -> Path:
        return self.data_dir / "phantom"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{(self.data_dir / 'chexretrieve.sqlite').resolve()}"

    @property
    def feature_cache_dir(self) -> Path:
        return self.data_dir / "features"
