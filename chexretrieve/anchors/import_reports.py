"""``chexretrieve anchors import-reports``: reports -> a broad prior corpus in the private folder.

The reports come from a store (``Store.report_texts``: what ``chexretrieve ingest`` stored from
MIMIC's ``.txt`` files or a ``--reports`` CSV) or from a folder of ``.txt`` reports. Each sentence
is de-identified by :class:`chexretrieve.anchors.phi_scrub.PhiScrubber`, with the store's own
identifiers (:func:`store_identifiers`) removed exactly. The set (``broad/reports-<name>``, see
:mod:`chexretrieve.anchors.report_corpus`) is written as a new version to the private anchors
folder (``broad_prior.private_anchors_root``) and records the scrubber and the store it came
from: the prior takes it for that store only, or where it is named (``--prior``). A set whose
licence forbids redistribution is written nowhere else, and the private folder gets a
``.gitignore`` that ignores everything in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.anchors.anchor_set import anchors_root
from chexretrieve.anchors.broad_prior import PRIVATE_ANCHORS_ENV, private_anchors_root
from chexretrieve.anchors.files import latest_variants, save_new_version
from chexretrieve.anchors.phi_scrub import ArchiveIdentifiers, PhiScrubber
from chexretrieve.anchors.report_corpus import report_anchor_set

REPOSITORY = Path(__file__).resolve().parents[2]
PHYSIONET_LICENCE = (
    "PhysioNet Credentialed Health Data License 1.5.0 (MIMIC-CXR): no redistribution"
)
_GITIGNORE = (
    "# chexretrieve private anchors: corpora from reports whose licence forbids redistribution.\n"
    "# Never commit or share these files.\n*\n"
)
#: DICOM header elements (person names, PN) whose values are removed from every report
NAME_ELEMENTS = frozenset(
    {
        "PatientName", "OtherPatientNames", "PatientBirthName", "PatientMotherBirthName",
        "ReferringPhysicianName", "PerformingPhysicianName", "NameOfPhysiciansReadingStudy",
        "OperatorsName", "PhysiciansOfRecord", "RequestingPhysician", "ResponsiblePerson",
    }
)  # fmt: skip
#: DICOM header elements holding identifiers or dates beside the ones the store keeps
ID_ELEMENTS = frozenset({"PatientID", "OtherPatientIDs", "AccessionNumber", "StudyID"})
DATE_ELEMENTS = frozenset({"PatientBirthDate", "StudyDate"})


@dataclass(frozen=True)
class ImportResult:
    path: Path
    key: str
    sentences: int
    reports: int
    unchanged: bool  # the newest version already held these sentences, scrubbed the same way
    restricted: bool
    in_prior: bool  # written where the prior rule looks (the private anchors folder)
    scrubber: str  # the de-identification's name and version, as recorded in the set
    identifiers: int  # archive identifiers removed exactly


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


def store_identifiers(store, progress: Callable[[int, int], None] | None = None) -> tuple:
    """(ArchiveIdentifiers, files unread) of a store: its ids and dates, plus the person names,
    ids and dates of one DICOM header per study (files that are gone or unreadable are counted,
    their store values still apply)."""
    from chexretrieve.dicom import RejectedFile, list_text_fields, parse_date

    held = store.archive_identifiers()
    names: set[str] = set()
    ids, dates = set(held["ids"]), set(held["dates"])
    unread = 0
    files = held["dicom_files"]
    for done, path in enumerate(files, 1):
        try:
            fields = list_text_fields(path)
        except (OSError, RejectedFile, ValueError):
            unread += 1
            continue
        for element, value in fields:
            if element in NAME_ELEMENTS:
                names.add(value)
            elif element in ID_ELEMENTS:
                ids.add(value)
            elif element in DATE_ELEMENTS and (day := parse_date(value)) is not None:
                dates.add(day)
        if progress is not None:
            progress(done, len(files))
    identifiers = ArchiveIdentifiers(frozenset(names), frozenset(ids), frozenset(dates))
    return identifiers, unread


def _check_target(target: Path, redistributable: bool) -> None:
    """A restricted corpus goes to the private anchors folder only (never the repository)."""
    private = private_anchors_root()
    for folder, what in ((REPOSITORY, "the repository"), (anchors_root(), "the anchors folder")):
        if _inside(target, folder) and not redistributable:
            raise ValueError(
                f"{target} is inside {what} ({folder}); a corpus whose licence forbids "
                "redistribution must never be committed: it stays in the private anchors folder, "
                "or pass --redistributable if the licence allows sharing"
            )
    if not redistributable and not _inside(target, private):
        raise ValueError(
            f"{target} is outside the private anchors folder ({private}); a corpus whose "
            f"licence forbids redistribution never leaves it: set ${PRIVATE_ANCHORS_ENV} to "
            "choose that folder, or pass --redistributable if the licence allows sharing"
        )


def import_reports(
    reports: list[str],
    name: str,
    *,
    where: str,
    licence: str = PHYSIONET_LICENCE,
    redistributable: bool = False,
    out: Path | None = None,
    identifiers: ArchiveIdentifiers | None = None,
    store: str | None = None,
) -> ImportResult:
    """Build ``broad/reports-<name>`` from ``reports`` and save it as a new version in ``out``
    (default: the private anchors folder). ``store``: the identity of the store the reports came
    from (``Store.identity``). ValueError / AnchorSetError say what is wrong."""
    target = Path(out) if out is not None else private_anchors_root()
    _check_target(target, redistributable)
    scrubber = PhiScrubber(identifiers or ArchiveIdentifiers())
    options = dict(
        licence=licence, redistributable=redistributable, where=where, scrubber=scrubber,
        store=store,
    )  # fmt: skip
    anchor_set = report_anchor_set(reports, name, **options)
    recorded = anchor_set.sources["reports"].parameters
    existing = latest_variants(anchor_set.context, target) if target.is_dir() else []
    newest = max(existing, key=lambda s: s.version) if existing else None
    in_prior = _inside(target, private_anchors_root())
    if newest is not None and newest.content_hash == anchor_set.content_hash:
        before = newest.sources.get("reports")
        same = before is not None and all(
            before.parameters.get(k) == recorded.get(k) for k in ("scrubber", "store", "licence")
        )
        if same:
            return ImportResult(
                Path(newest.path), newest.key, len(newest), len(reports), True,
                not redistributable, in_prior, recorded["scrubber"], len(scrubber.identifiers),
            )  # fmt: skip
    if newest is not None:
        anchor_set = report_anchor_set(reports, name, **options, version=newest.version + 1)
    target.mkdir(parents=True, exist_ok=True)
    if not redistributable and not (target / ".gitignore").exists():
        (target / ".gitignore").write_text(_GITIGNORE, encoding="utf-8")
    path = save_new_version(anchor_set, target, allow_restricted=True)
    return ImportResult(
        path, anchor_set.key, len(anchor_set), len(reports), False, not redistributable,
        in_prior, recorded["scrubber"], len(scrubber.identifiers),
    )  # fmt: skip
