"""Which version of the code a report's numbers (and an evaluation cache's content) come from.

Two parts, both recorded in every report manifest (``provenance.code``) and folded into the
evaluation's cache keys:

* ``EVALUATION_CODE_VERSION``: a number declared by hand and bumped when a change meant to alter the
  numbers lies outside the hashed modules (a new library default, a changed data file format);
* a content fingerprint of each module the numbers depend on (``CODE_MODULES``): the sha256 of the
  module's syntax tree with docstrings removed (``module_fingerprint``). Comments, formatting and
  docstrings do not change it; any change to what the code does does. A commit that touches none of
  these modules (the UI, the store, the docs, another command) changes no fingerprint, so it leaves
  every committed report current.

Standard library only: the staleness check and the cache keys import it without numpy or torch.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

#: bumped by hand when the evaluation's numbers change for a reason the module hashes do not see
EVALUATION_CODE_VERSION = 1

#: the checkout's root (the folder holding the ``chexretrieve`` package)
REPO_ROOT = Path(__file__).resolve().parents[2]

#: the phantom generator: what a phantom world's pixels, labels and reports depend on
GENERATOR_MODULES: tuple[str, ...] = (
    "chexretrieve/phantom/anatomy.py",
    "chexretrieve/phantom/canvas.py",
    "chexretrieve/phantom/config.py",
    "chexretrieve/phantom/generator.py",
    "chexretrieve/phantom/report.py",
    "chexretrieve/phantom/sampling.py",
    "chexretrieve/phantom/signs.py",
    "chexretrieve/phantom/splits.py",
)
#: the phantom encoder's forward pass and preprocessing (the weights themselves are hashed apart)
PHANTOM_ENCODER_MODULES: tuple[str, ...] = (
    "chexretrieve/encoders/base.py",
    "chexretrieve/encoders/device.py",
    "chexretrieve/encoders/phantom.py",
    "chexretrieve/encoders/phantom_model.py",
)
#: how anchor sets are read and which ones form the prior
ANCHOR_MODULES: tuple[str, ...] = (
    "chexretrieve/anchors/anchor_set.py",
    "chexretrieve/anchors/broad_prior.py",
    "chexretrieve/anchors/files.py",
)
#: the retrieval evaluation from embeddings to tables (the geometry package in full)
RETRIEVAL_MODULES: tuple[str, ...] = (
    "chexretrieve/geometry",
    "chexretrieve/metrics.py",
    "chexretrieve/evaluation/code_version.py",
    "chexretrieve/evaluation/cohort.py",
    "chexretrieve/evaluation/config.py",
    "chexretrieve/evaluation/experiments.py",
    "chexretrieve/evaluation/geometries.py",
    "chexretrieve/evaluation/inputs.py",
    "chexretrieve/evaluation/intervals.py",
    "chexretrieve/evaluation/multiplicity.py",
    "chexretrieve/evaluation/phantom_source.py",
    "chexretrieve/evaluation/pipeline.py",
    "chexretrieve/evaluation/protocol.py",
    "chexretrieve/evaluation/runner.py",
    "chexretrieve/evaluation/scoring.py",
    "chexretrieve/evaluation/sources.py",
    "chexretrieve/evaluation/spread.py",
    "chexretrieve/evaluation/summaries.py",
    "chexretrieve/evaluation/temperature.py",
)
#: per kind of report, the modules its numbers depend on (a folder stands for its *.py files); a
#: report kind not listed here names its modules in its own manifest
CODE_MODULES: dict[str, tuple[str, ...]] = {
    "retrieval": RETRIEVAL_MODULES + GENERATOR_MODULES + PHANTOM_ENCODER_MODULES + ANCHOR_MODULES,
    "gates": RETRIEVAL_MODULES
    + GENERATOR_MODULES
    + PHANTOM_ENCODER_MODULES
    + ANCHOR_MODULES
    + ("chexretrieve/evaluation/gates.py", "chexretrieve/phantom/zero_shot.py"),
    # the density report (`eval density`); its engineer may list more (the manifest keeps the list)
    "density": (
        "chexretrieve/geometry",
        "chexretrieve/density",
        "chexretrieve/dicom",
        "chexretrieve/evaluation/cache_keys.py",
        "chexretrieve/evaluation/code_version.py",
        "chexretrieve/evaluation/density_claims.py",
        "chexretrieve/evaluation/density_commands.py",
        "chexretrieve/evaluation/density_data.py",
        "chexretrieve/evaluation/density_decomposition.py",
        "chexretrieve/evaluation/density_images.py",
        "chexretrieve/evaluation/density_known.py",
        "chexretrieve/evaluation/density_metrics.py",
        "chexretrieve/evaluation/density_models.py",
        "chexretrieve/evaluation/density_ood.py",
        "chexretrieve/evaluation/density_report.py",
        "chexretrieve/evaluation/density_runs.py",
        "chexretrieve/evaluation/density_selection.py",
        "chexretrieve/evaluation/density_summary.py",
        "chexretrieve/evaluation/density_tail.py",
        "chexretrieve/evaluation/phantom_source.py",
    )
    + GENERATOR_MODULES
    + PHANTOM_ENCODER_MODULES
    + ANCHOR_MODULES,
}


def expand_modules(entries: Iterable[str], root: Path = REPO_ROOT) -> list[str]:
    """The module files an entry list names, relative to ``root``: a folder stands for every
    ``*.py`` file under it; sorted, each once."""
    files: set[str] = set()
    for entry in entries:
        path = root / entry
        if path.is_dir():
            files |= {p.relative_to(root).as_posix() for p in path.rglob("*.py")}
        else:
            files.add(Path(entry).as_posix())
    return sorted(files)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def source_fingerprint(source: str) -> str:
    """sha256 (first 16 hex digits) of Python source's syntax tree without docstrings: the same
    for two sources that differ only in comments, formatting or docstrings."""
    tree = _strip_docstrings(ast.parse(source))
    dumped = ast.dump(tree, annotate_fields=True, include_attributes=False)
    return hashlib.sha256(dumped.encode("utf-8")).hexdigest()[:16]


@lru_cache(maxsize=512)
def _cached_fingerprint(path: str, mtime_ns: int, size: int) -> str:
    return source_fingerprint(Path(path).read_text(encoding="utf-8"))


def module_fingerprint(relative: str, root: Path = REPO_ROOT) -> str:
    """The fingerprint of one module file of the checkout; "missing" when it does not exist."""
    path = root / relative
    if not path.is_file():
        return "missing"
    stat = path.stat()
    return _cached_fingerprint(str(path), stat.st_mtime_ns, stat.st_size)


def code_fingerprints(entries: Iterable[str], root: Path = REPO_ROOT) -> dict[str, str]:
    """module file -> fingerprint for every file the entries name (see ``expand_modules``)."""
    return {name: module_fingerprint(name, root) for name in expand_modules(entries, root)}


def code_record(kind: str, root: Path = REPO_ROOT) -> dict:
    """``provenance.code`` of a report of ``kind``: the declared version and the module hashes."""
    if kind not in CODE_MODULES:
        raise ValueError(f"unknown report kind {kind!r}; known: {', '.join(sorted(CODE_MODULES))}")
    return {
        "version": EVALUATION_CODE_VERSION,
        "modules": code_fingerprints(CODE_MODULES[kind], root),
    }


def combined_fingerprint(entries: Iterable[str], root: Path = REPO_ROOT) -> str:
    """One short hash over the declared version and the modules' fingerprints (cache keys)."""
    digest = hashlib.sha256(f"v{EVALUATION_CODE_VERSION}\n".encode())
    for name, value in code_fingerprints(entries, root).items():
        digest.update(f"{name}={value}\n".encode())
    return digest.hexdigest()[:16]
