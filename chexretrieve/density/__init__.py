"""The archive's own density: is a query like the archive, how rare is an image, what is it made of.

A mixture of von Mises–Fisher distributions (:mod:`chexretrieve.geometry.movmf_density`) is fitted
to one encoder's archive embeddings (:mod:`chexretrieve.density.archive`), saved under the cache
root per store, encoder and store generation, and consulted by every search
(:mod:`chexretrieve.density.provider`): the query's log-density, its percentile among archive
images, an out-of-distribution flag below a low archive percentile, and its decomposition into
named components. ``chexretrieve density fit|show|rare`` drive it from the command line.
"""

from chexretrieve.density.archive import ArchiveDensity, ComponentName, fit_archive_density
from chexretrieve.density.config import DensityConfig
from chexretrieve.density.provider import (
    OOD_MESSAGE,
    ArchiveDensityProvider,
    DensityUnavailable,
    QueryDensity,
)

__all__ = [
    "OOD_MESSAGE",
    "ArchiveDensity",
    "ArchiveDensityProvider",
    "ComponentName",
    "DensityConfig",
    "DensityUnavailable",
    "QueryDensity",
    "fit_archive_density",
]
