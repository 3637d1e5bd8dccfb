"""The Indiana University chest X-ray reports (OpenI, 3,955 reports) as an extra broad corpus.

``torchxrayvision`` ships them as ``torchxrayvision/data/NLMCXR_reports.tgz`` (one XML file per
report under ``ecgen-radiology/``, sections in ``<AbstractText Label="FINDINGS">`` and so on).
Their licence (CC BY-NC-ND 4.0) allows reading them at run time only: this module builds an
in-memory anchor set, marks it ``no_redistribution``, and :func:`save_new_version` refuses to write
such a set. Nothing derived from the reports is ever committed. The package is not a dependency:
install it (``pip install torchxrayvision``) or point ``$CHEXRETRIEVE_IU_REPORTS`` at the archive.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.anchors.anchor_set import AnchorSentence, AnchorSet, AnchorSource
from chexretrieve.anchors.topics import infer_polarity

#: environment variable naming the reports archive (overrides the torchxrayvision copy)
IU_REPORTS_ENV = "CHEXRETRIEVE_IU_REPORTS"
CONTEXT = "broad/iu-reports"
LICENCE = "CC BY-NC-ND 4.0 (Indiana University / OpenI); run-time use only, never redistributed"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


@dataclass(frozen=True)
class IUReport:
    report_id: str  # the XML file name without extension, e.g. "1"
    sections: dict[str, str]  # label (FINDINGS, IMPRESSION, ...) -> text


def find_iu_reports_archive() -> Path:
    """$CHEXRETRIEVE_IU_REPORTS, else the copy inside an installed torchxrayvision."""
    override = os.environ.get(IU_REPORTS_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise ValueError(f"${IU_REPORTS_ENV} points at {path}, which is not a file")
        return path
    spec = importlib.util.find_spec("torchxrayvision")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the Indiana University reports come with the torchxrayvision package: "
            f"`pip install torchxrayvision`, or set ${IU_REPORTS_ENV} to NLMCXR_reports.tgz"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "NLMCXR_reports.tgz"
    if not path.is_file():
        raise ValueError(f"torchxrayvision is installed but {path} is missing")
    return path


def read_iu_reports(path: str | Path | None = None) -> list[IUReport]:
    """Every report in the archive, ordered by numeric id; unreadable members raise ValueError."""
    path = Path(path) if path is not None else find_iu_reports_archive()
    reports = []
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive.getmembers():
                if not (member.isfile() and member.name.endswith(".xml")):
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                try:
                    root = ET.fromstring(handle.read())
                except ET.ParseError as exc:
                    raise ValueError(f"{path}: {member.name} is not valid XML ({exc})") from exc
                sections = {
                    node.get("Label", "").upper(): " ".join((node.text or "").split())
                    for node in root.iter("AbstractText")
                }
                reports.append(IUReport(Path(member.name).stem, sections))
    except (OSError, tarfile.TarError) as exc:
        raise ValueError(f"cannot read the reports archive {path}: {exc}") from exc
    return sorted(
        reports,
        key=lambda r: (
            not r.report_id.isdigit(),
            int(r.report_id or 0) if r.report_id.isdigit() else 0,
            r.report_id,
        ),
    )


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def iu_report_sentences(
    path: str | Path | None = None,
    sections: tuple[str, ...] = ("FINDINGS", "IMPRESSION"),
    min_chars: int = 12,
    keep_redacted: bool = False,
) -> list[str]:
    """Distinct sentences of the chosen sections, in report order.

    The reports replace de-identified words with ``XXXX``; such sentences are dropped unless
    ``keep_redacted``. Sentences shorter than ``min_chars`` (e.g. "1.") are dropped.
    """
    seen: set[str] = set()
    out = []
    for report in read_iu_reports(path):
        for section in sections:
            for sentence in split_sentences(report.sections.get(section, "")):
                if len(sentence) < min_chars or (not keep_redacted and "XXXX" in sentence):
                    continue
                key = sentence.casefold()
                if key not in seen:
                    seen.add(key)
                    out.append(sentence[:300])
    return out


def iu_broad_anchor_set(path: str | Path | None = None, **options) -> AnchorSet:
    """An in-memory broad set of the report sentences (polarity by rule); never saved to disk."""
    sentences = iu_report_sentences(path, **options)
    if not sentences:
        raise ValueError("the reports archive yielded no sentences; check the file")
    source = AnchorSource(
        kind="curated",
        note=f"Indiana University chest X-ray reports. {LICENCE}.",
        parameters={"no_redistribution": True, "polarity": "rule (topics.infer_polarity)"},
    )
    entries = [AnchorSentence(s, infer_polarity(s), "iu") for s in sentences]
    return AnchorSet.create(
        sentences=entries,
        source={"iu": source},
        context=CONTEXT,
        description="Sentences of the Indiana University chest X-ray reports (run time only).",
    )
