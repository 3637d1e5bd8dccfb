"""Natural-image anchors: prompt templates over class or style names (the paper's ImageNet-R setup).

Name lists are data files under ``anchors/natural/`` (one name a line, ``#`` comments allowed).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from chexretrieve.anchors.anchor_set import AnchorSet, AnchorSetError, AnchorSource, anchors_root

#: the paper's template for class-name anchors
CLASS_TEMPLATE = "a photo of a {}"
#: the paper's template for style anchors
STYLE_TEMPLATE = "a {} rendition of an object"

#: kind -> (names file under anchors/natural/, template, context name)
NATURAL_SETS = {
    "imagenet-r-classes": ("imagenet_r_classes.txt", CLASS_TEMPLATE),
    "imagenet-r-styles": ("styles.txt", STYLE_TEMPLATE),
}


def natural_image_anchors(names: Iterable[str], template: str) -> list[str]:
    """``[template.format(name) for name in names]`` with checks: one ``{}``, names unique."""
    if template.count("{}") != 1 or "{" in template.replace("{}", "", 1):
        raise ValueError(f"template {template!r} needs exactly one '{{}}' placeholder")
    out, seen = [], set()
    for name in names:
        clean = " ".join(str(name).split())
        if not clean:
            raise ValueError("empty name in the name list; remove blank entries")
        if clean.lower() in seen:
            raise ValueError(f"name {clean!r} appears twice in the name list")
        seen.add(clean.lower())
        out.append(template.format(clean))
    if not out:
        raise ValueError("the name list is empty")
    return out


def read_name_list(path: str | Path) -> list[str]:
    """Names from a text file: one per line; blank lines and ``#`` comments ignored."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read name list {path}: {exc}") from exc
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def natural_image_anchor_set(kind: str, root: str | Path | None = None) -> AnchorSet:
    """An in-memory anchor set (context ``natural/<kind>``) from a names file and its template."""
    if kind not in NATURAL_SETS:
        raise AnchorSetError(f"unknown natural-image set {kind!r}; one of {sorted(NATURAL_SETS)}")
    filename, template = NATURAL_SETS[kind]
    folder = (Path(root) if root is not None else anchors_root()) / "natural"
    names = read_name_list(folder / filename)
    sentences = natural_image_anchors(names, template)
    source = AnchorSource(
        kind="template",
        prompt=template,
        parameters={"names_file": f"anchors/natural/{filename}", "names": len(names)},
    )
    return AnchorSet.create(
        sentences=[(s, "positive") for s in sentences],
        source=source,
        context=f"natural/{kind}",
        description=f"'{template}' over {len(names)} names from {filename}",
        created="2026-11-29",
    )
