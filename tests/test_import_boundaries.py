"""Each outside library enters the package through one place, and the geometry through none.

The rules (the brief's "one importer per boundary"): SQLAlchemy only in ``chexretrieve.store``,
Gradio only in ``chexretrieve.ui``, pydicom only in ``chexretrieve.dicom``, openai only in
``chexretrieve.anchors.generate``, FAISS only in ``chexretrieve.ann`` and the exact scans of
``chexretrieve.search.scoring``, Ray only in ``chexretrieve.distributed`` (distributed ingest and
the Ray search backend); ``chexretrieve.geometry`` imports nothing but the standard
library, numpy, scipy, scikit-learn and itself. Every import statement is read with ``ast``,
function-level ones included (a lazy import still crosses the boundary).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "chexretrieve"

#: outside library -> the modules (or packages: a prefix followed by a dot) allowed to import it
BOUNDARIES = {
    "sqlalchemy": ("chexretrieve.store",),
    "gradio": ("chexretrieve.ui",),
    "pydicom": ("chexretrieve.dicom",),
    "openai": ("chexretrieve.anchors.generate",),
    "faiss": ("chexretrieve.ann", "chexretrieve.search.scoring"),
    "philter_lite": ("chexretrieve.anchors.phi_scrub",),
    "nltk": ("chexretrieve.anchors.phi_scrub",),
    "ray": ("chexretrieve.distributed",),
}
#: the only top-level names chexretrieve.geometry may import besides the standard library
GEOMETRY_ALLOWED = {"numpy", "scipy", "sklearn", "chexretrieve"}


def imported_roots(root: Path) -> dict[str, set[str]]:
    """Dotted module name -> top-level names it imports (relative imports are its own package)."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add(root.name if node.level else (node.module or "").split(".")[0])
        found[".".join(parts)] = names
    return found


def _inside(module: str, owners: tuple[str, ...]) -> bool:
    return any(module == owner or module.startswith(owner + ".") for owner in owners)


def boundary_violations(found: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, names in sorted(found.items()):
        for library, owners in BOUNDARIES.items():
            if library in names and not _inside(module, owners):
                wrong.append(f"{module} imports {library} (only {', '.join(owners)} may)")
        if _inside(module, ("chexretrieve.geometry",)):
            extra = sorted(names - GEOMETRY_ALLOWED - set(sys.stdlib_module_names))
            if extra:
                wrong.append(f"{module} imports {', '.join(extra)} (the geometry may not)")
    return wrong


def test_every_outside_library_has_one_importer_and_the_geometry_none():
    found = imported_roots(PACKAGE)
    assert "chexretrieve.geometry.gaussian" in found and "chexretrieve.store.engine" in found
    assert boundary_violations(found) == []


def test_the_check_finds_a_crossing(tmp_path):
    """The same walk over a made-up package with one crossing of each kind."""
    root = tmp_path / "chexretrieve"
    (root / "geometry").mkdir(parents=True)
    (root / "search").mkdir()
    (root / "geometry" / "gaussian.py").write_text("import numpy\n\ndef f():\n    import torch\n")
    (root / "search" / "service.py").write_text("from sqlalchemy.orm import Session\n")
    (root / "search" / "scoring.py").write_text("import faiss\nfrom . import service\n")
    (root / "search" / "backend.py").write_text("def f():\n    import ray.util\n")
    wrong = boundary_violations(imported_roots(root))
    assert wrong == [
        "chexretrieve.geometry.gaussian imports torch (the geometry may not)",
        "chexretrieve.search.backend imports ray (only chexretrieve.distributed may)",
        "chexretrieve.search.service imports sqlalchemy (only chexretrieve.store may)",
    ]
