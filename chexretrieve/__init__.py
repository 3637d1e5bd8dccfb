"""chexretrieve: finding-specific chest X-ray case retrieval with anchor-divergence geometries."""

__version__ = "0.1.0"
