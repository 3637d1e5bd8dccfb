"""One registry of geometry names (chexretrieve.geometry.names), read the same way by search, the
UI, the evaluation and anchor curation."""

from __future__ import annotations

import pytest

from chexretrieve.anchors.config import ImpactConfig
from chexretrieve.evaluation.config import ALL_GEOMETRIES
from chexretrieve.evaluation.geometries import DISPLAY_NAMES
from chexretrieve.evaluation.geometries import parse_geometry as parse_eval_geometry
from chexretrieve.geometry import (
    GEOMETRIES,
    GEOMETRY_CHOICES,
    GEOMETRY_KINDS,
    POSTERIOR_KINDS,
    GeometryName,
    fit_geometry,
    geometry_name,
)
from chexretrieve.geometry.factory import _CLASSES
from chexretrieve.search.features import parse_geometry as parse_search_geometry

# written out by hand: the names users, reports and the README know
SEARCH_SPELLING = (
    "cosine", "iti", "softmax", "gaussian", "latent_gaussian", "latent_spherical", "gmm", "movmf",
    "gaussian_posterior", "latent_gaussian_posterior", "latent_spherical_posterior",
    "gmm_posterior",
)  # fmt: skip


def test_the_names_are_the_documented_ones():
    assert GEOMETRY_CHOICES == SEARCH_SPELLING
    assert ALL_GEOMETRIES == tuple(
        f"posterior_{n.removesuffix('_posterior')}" if n.endswith("_posterior") else n
        for n in SEARCH_SPELLING
    )
    assert tuple(_CLASSES) == GEOMETRY_KINDS  # every kind named can be fitted, and no other


@pytest.mark.parametrize("kind", POSTERIOR_KINDS)
def test_both_posterior_spellings_name_one_geometry(kind):
    wanted = GeometryName(kind, posterior=True)
    for spelling in (f"{kind}_posterior", f"posterior_{kind}", f" Posterior-{kind.upper()} "):
        assert geometry_name(spelling) == wanted
        assert parse_search_geometry(spelling) == wanted
        spec = parse_eval_geometry(spelling.strip())
        assert (spec.kind, spec.posterior, spec.name) == (kind, True, f"posterior_{kind}")
    assert wanted.needs_broad_corpus and wanted.needs_anchors


def test_display_names_and_what_each_needs():
    assert geometry_name("posterior_latent_spherical").display == "Posterior latent spherical"
    assert geometry_name("gmm").display == "GMM"
    assert DISPLAY_NAMES["posterior_gaussian"] == "Posterior Gaussian"
    assert not geometry_name("cosine").needs_anchors
    assert [g.name for g in GEOMETRIES if g.needs_broad_corpus] == [
        "gaussian_posterior", "latent_gaussian_posterior", "latent_spherical_posterior",
        "gmm_posterior",
    ]  # fmt: skip


@pytest.mark.parametrize("bad", ["movmf_posterior", "posterior_softmax", "euclid", ""])
def test_unknown_names_are_refused_with_the_list(bad):
    with pytest.raises(ValueError, match="choose one of: cosine, iti, softmax"):
        geometry_name(bad)
    with pytest.raises(ValueError, match="unknown geometry"):
        parse_eval_geometry(bad or "?")


def test_curation_impact_reads_names_through_the_registry():
    assert ImpactConfig(geometry="Latent-Gaussian").geometry == "latent_gaussian"
    with pytest.raises(ValueError, match="needs the broad corpus"):
        ImpactConfig(geometry="posterior_gaussian")
    with pytest.raises(ValueError, match="unknown geometry"):
        ImpactConfig(geometry="euclid")
    # what impact then fits is a plain kind of fit_geometry
    assert fit_geometry(ImpactConfig(geometry="Cosine").geometry, None).kind == "cosine"
