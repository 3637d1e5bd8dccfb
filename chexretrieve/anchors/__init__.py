"""Anchor sets: the versioned text that defines each finding's retrieval geometry.

Public API (files under the top-level ``anchors/`` folder; see README "Anchor sets")::

    load_anchor_set(path) -> AnchorSet            # validate + load one file
    find_anchor_sets(root=None, finding=None)     # every set, or one finding's
    latest_anchor_set(finding, variant=None)      # newest version of one variant
    save_new_version(anchor_set, root=None)       # write, never overwrite
    diff_anchor_sets(a, b) -> AnchorSetDiff
    natural_image_anchors(names, template) -> list[str]

The LLM generator (``chexretrieve.anchors.generate``) and curation tools
(``chexretrieve.anchors.curation``) are imported from their modules; they are not loaded here.
"""

from chexretrieve.anchors.anchor_set import (
    ANCHORS_ENV,
    POLARITIES,
    AnchorSentence,
    AnchorSet,
    AnchorSetError,
    AnchorSource,
    anchor_cache_key,
    anchors_root,
    content_hash,
)
from chexretrieve.anchors.diff import AnchorSetDiff, diff_anchor_sets
from chexretrieve.anchors.files import (
    Problem,
    ValidationReport,
    find_anchor_sets,
    format_anchor_set,
    latest_anchor_set,
    latest_variants,
    load_anchor_set,
    resolve_anchor_set,
    save_new_version,
    validate_anchor_file,
)
from chexretrieve.anchors.natural import natural_image_anchor_set, natural_image_anchors

__all__ = [
    "ANCHORS_ENV",
    "POLARITIES",
    "AnchorSentence",
    "AnchorSet",
    "AnchorSetDiff",
    "AnchorSetError",
    "AnchorSource",
    "anchor_cache_key",
    "Problem",
    "ValidationReport",
    "anchors_root",
    "content_hash",
    "diff_anchor_sets",
    "find_anchor_sets",
    "format_anchor_set",
    "latest_anchor_set",
    "latest_variants",
    "load_anchor_set",
    "natural_image_anchor_set",
    "natural_image_anchors",
    "resolve_anchor_set",
    "save_new_version",
    "validate_anchor_file",
]
