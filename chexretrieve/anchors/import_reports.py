"""``chexretrieve anchors import-reports``: reports -> a broad prior corpus in the private folder.

The reports come from a store (``Store.report_texts``: what ``chexretrieve ingest`` stored from
MIMIC's ``.txt`` files or a ``--reports`` CSV) or from a folder of ``.txt`` reports. The set
(``broad/reports-<name>``, see :mod:`chexretrieve.anchors.report_corpus`) is written as a new
version to the private anchors folder (``broad_prior.private_anchors_root``), where the one
prior rule picks it up for search, serve, the UI and evaluation. A set whose
licence forbids redistribution is never written inside the repository or its anchors folder, and
the private folder gets a ``.gitignore`` that ignores everything in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chexretrieve.anchors.anchor_set import anchors_root
from chexretrieve.anchors.broad_prior import private_anchors_root
from chexretrieve.anchors.files import latest_variants, save_new_version
from chexretrieve.anchors.report_corpus import report_anchor_set

REPOSITORY = Path(__file__).resolve().parents[2]
PHYSIONET_LICENCE = (
    "PhysioNet Credentialed Health Data License 1.5.0 (MIMIC-CXR): no redistribution"
)
_GITIGNORE = (
    "# chexretrieve private anchors: corpora from reports whose licence forbids redistribution.\n"
    "# Never commit or share these files.\n*\n"
)


@dataclass(frozen=True)
class ImportResult:
    path: Path
    key: str
    sentences: int
    reports: int
    unchanged: bool  # the newest version already held these sentences
    restricted: bool
    in_prior: bool  # written where the prior rule looks (the private anchors folder)


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def import_reports(
    reports: list[str],
    name: str,
    *,
    where: str,
    licence: str = PHYSIONET_LICENCE,
    redistributable: bool = False,
    out: Path | None = None,
) -> ImportResult:
    """Build ``broad/reports-<name>`` from ``reports`` and save it as a new version in ``out``
    (default: the private anchors folder). ValueError / AnchorSetError say what is wrong; a
    restricted set is refused inside the repository or the anchors folder."""
    target = Path(out) if out is not None else private_anchors_root()
    if not redistributable:
        for folder, what in (
            (REPOSITORY, "the repository"),
            (anchors_root(), "the anchors folder"),
        ):
            if _inside(target, folder):
                raise ValueError(
                    f"{target} is inside {what} ({folder}); a corpus whose licence forbids "
                    "redistribution must never be committed: write it outside (default: the "
                    "private anchors folder), or pass --redistributable if the licence allows it"
                )
    anchor_set = report_anchor_set(
        reports, name, licence=licence, redistributable=redistributable, where=where
    )
    existing = latest_variants(anchor_set.context, target) if target.is_dir() else []
    newest = max(existing, key=lambda s: s.version) if existing else None
    if newest is not None and newest.content_hash == anchor_set.content_hash:
        return ImportResult(
            Path(newest.path), newest.key, len(newest), len(reports), True, not redistributable,
            _inside(target, private_anchors_root()),
        )  # fmt: skip
    if newest is not None:
        anchor_set = report_anchor_set(
            reports, name, licence=licence, redistributable=redistributable, where=where,
            version=newest.version + 1,
        )  # fmt: skip
    target.mkdir(parents=True, exist_ok=True)
    if not redistributable and not (target / ".gitignore").exists():
        (target / ".gitignore").write_text(_GITIGNORE, encoding="utf-8")
    path = save_new_version(anchor_set, target, allow_restricted=True)
    return ImportResult(
        path, anchor_set.key, len(anchor_set), len(reports), False, not redistributable,
        _inside(target, private_anchors_root()),
    )  # fmt: skip
