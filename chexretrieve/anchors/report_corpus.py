"""A broad corpus from a user's own radiology reports (``chexretrieve anchors import-reports``).

Reports (from the store, or ``.txt`` files in a folder such as MIMIC-CXR's ``files/``) ->
FINDINGS and IMPRESSION sections (the whole text when a report has neither) -> sentences ->
PHI scrubbed the way MIMIC-CXR writes de-identified text, ``___`` in place of:

* dates (``12/03/2021``, ``2021-12-03``, ``Dec 3``, ``3 December 2021``) and clock times (``8:15``);
* names after a title (``Dr. Smith`` -> ``Dr. ___``; also Mr., Mrs., Ms., Prof.);
* numbers, except a measurement with its unit (``5 mm``, ``2.3 cm``, ``12 French``, ``30%``),
  so ages, record numbers, phone numbers and pager numbers go;

-> content-free sentences dropped (:func:`is_content_free`: "As above.", "No change.", "Otherwise
unchanged." state no finding, organ, device or normal result of their own; marked by polarity they
would enter the prior as positive statements) -> sentences deduplicated (case and spacing
ignored), polarity by rule
(``topics.infer_polarity``) -> one anchor set of context ``broad/reports-<name>``. The set records
its licence; unless the reports may be redistributed it is marked ``no_redistribution`` and is
written only to the private anchors folder, outside the repository, never to be committed.
Scrubbing by rule lowers the risk of identifiers but is no de-identification guarantee: use it on
reports that are de-identified already (MIMIC-CXR) or keep the output as private as the reports.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from chexretrieve.anchors.anchor_set import AnchorSentence, AnchorSet, AnchorSource
from chexretrieve.anchors.topics import infer_polarity

BLANK = "___"
_MONTHS = (
    "jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?|"
    "sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_UNITS = r"(?:(?:mm|cm|m|ml|cc|mg|kg|g|fr|french|degrees?|mmhg|hz)\b|%)"
#: a number that stays: a measurement with its unit, or an ordinal (rib numbers: "6th")
_KEPT_NUMBER = rf"(?!\s*(?:x\s*\d+(?:\.\d+)?\s*)?{_UNITS})(?!st\b|nd\b|rd\b|th\b)"
_SCRUBS = (
    (re.compile(r"\b\d{1,4}[/-]\d{1,2}[/-]\d{1,4}\b"), BLANK),  # 12/03/2021, 2021-12-03
    (
        re.compile(
            rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s+)?(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?"
            rf"(?:,?\s+\d{{4}})?\b|\b\d{{1,2}}\s+(?:{_MONTHS})\.?(?:\s+\d{{4}})?\b",
            re.IGNORECASE,
        ),
        BLANK,
    ),  # fmt: skip
    (re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?", re.IGNORECASE), BLANK),
    (
        re.compile(
            r"\b(Drs?|Mrs?|Ms|Prof|Doctor)\.?\s+(?:[A-Z][a-zA-Z'-]+|___)(?:\s+[A-Z][a-zA-Z'-]+)?"
        ),
        r"\1. " + BLANK,
    ),  # fmt: skip
    (re.compile(rf"\b\d+(?:\.\d+)?(?!\.\d)(?!\d){_KEPT_NUMBER}", re.IGNORECASE), BLANK),
)
_REPEATED_BLANKS = re.compile(r"___(?:[\s,/-]*___)+")
_SECTION = re.compile(r"^\s*([A-Z][A-Z /&]{2,40}):", re.MULTILINE)
_SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\bDr\.)(?<!\bMr\.)(?<!Mrs\.)(?<!\bMs\.)(?<!Prof\.)\s+(?=[A-Z0-9_])"
    r"|\n\s*\n|\s+(?=\d\.\s+[A-Z])"
)
_KEEP_SECTIONS = ("FINDINGS", "IMPRESSION")
#: words that refer to another text or time and say nothing of the image on their own: a
#: sentence made of these alone (numbers and ``___`` aside) is content-free
CONTENT_FREE_WORDS = frozenset(
    """a above again all an and any appreciable appreciably are as at be been before below
    change changed changes compared comparison current described detailed earlier essentially
    exam examination examinations exams film films finding findings for from given grossly has
    have here in interval is it largely mentioned new no noted now of on or otherwise overall
    previous previously prior radiograph radiographs recent relatively reported same see seen
    significant significantly similar since stable status study studies than that the there this
    to today unchanged visit was were with without""".split()
)


def scrub(text: str) -> str:
    """Dates, times, titled names and unit-less numbers replaced by ``___`` (see the module)."""
    for pattern, replacement in _SCRUBS:
        text = pattern.sub(replacement, text)
    return _REPEATED_BLANKS.sub(BLANK, text)


def report_sections(text: str) -> str:
    """The FINDINGS and IMPRESSION sections of a report; the whole text if it has neither."""
    marks = list(_SECTION.finditer(text))
    kept = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        if mark.group(1).strip().upper() in _KEEP_SECTIONS:
            kept.append(text[mark.end() : end])
    return "\n\n".join(kept) if kept else text


def is_content_free(sentence: str) -> bool:
    """True when every word of ``sentence`` is in :data:`CONTENT_FREE_WORDS` (case ignored): it
    points elsewhere ("As above.", "No change.", "Findings as described above.") and names no
    finding, organ, device or normal result. "Stable cardiomegaly." and "No pneumothorax." name
    one and are kept."""
    words = re.findall(r"[a-z]+", sentence.casefold().replace(BLANK, " "))
    return all(word in CONTENT_FREE_WORDS for word in words)


def report_sentences(
    text: str, min_words: int = 2, scrub_sentence: Callable[[str], str] = scrub
) -> list[str]:
    """Scrubbed sentences of one report's findings and impression (numbering and spacing gone);
    sentences with fewer than ``min_words`` words of letters, and content-free ones
    (:func:`is_content_free`), are dropped."""
    out = []
    for piece in _SENTENCE_END.split(report_sections(text)):
        sentence = " ".join(piece.split())
        sentence = re.sub(r"^\d+\.\s+", "", sentence)
        sentence = scrub_sentence(sentence).strip(" -,;")
        if len(re.findall(r"[A-Za-z]{2,}", sentence)) < min_words or is_content_free(sentence):
            continue
        if not sentence.endswith((".", "!", "?")):
            sentence += "."
        out.append(sentence[0].upper() + sentence[1:])
    return out


def corpus_sentences(
    reports: Iterable[str], min_words: int = 2, scrub_sentence: Callable[[str], str] = scrub
) -> list[str]:
    """Distinct scrubbed sentences over all reports, in report order (``scrub_sentence``: the
    de-identification, :class:`chexretrieve.anchors.phi_scrub.PhiScrubber` in an import)."""
    seen: set[str] = set()
    out = []
    for text in reports:
        for sentence in report_sentences(text, min_words, scrub_sentence):
            key = " ".join(sentence.casefold().rstrip(".!?").split())
            if key not in seen:
                seen.add(key)
                out.append(sentence)
    return out


def report_anchor_set(
    reports: list[str],
    name: str,
    *,
    licence: str,
    redistributable: bool,
    where: str,
    scrubber: Callable[[str], str],
    store: str | None = None,
    version: int = 1,
) -> AnchorSet:
    """The broad set ``broad/reports-<name>`` of the reports' sentences, de-identified by
    ``scrubber`` (its ``name`` and ``version`` are recorded); ``store``: the identity of the store
    the reports came from (the prior takes the set for that store only, unless named)."""
    sentences = corpus_sentences(reports, scrub_sentence=scrubber)
    if not sentences:
        raise ValueError(f"the {len(reports)} reports from {where} yielded no sentences")
    scrubbed_by = f"{getattr(scrubber, 'name', 'rules')} {getattr(scrubber, 'version', '')}"
    parameters = {
        "no_redistribution": not redistributable,
        "licence": licence,
        "reports": len(reports),
        "polarity": "rule (topics.infer_polarity)",
        "scrubber": scrubbed_by.strip(),
    }
    if store is not None:
        parameters["store"] = store
    source = AnchorSource(
        kind="curated",
        date=dt.date.today().isoformat(),
        note=(
            f"Sentences of {len(reports)} radiology reports ({where}), de-identified by "
            f"{scrubbed_by.strip()} (identifiers -> ___). Licence: {licence}."
        ),
        parameters=parameters,
    )
    entries = [AnchorSentence(s, infer_polarity(s), "reports") for s in sentences]
    return AnchorSet.create(
        sentences=entries,
        source={"reports": source},
        context=f"broad/reports-{name}",
        version=version,
        description=f"Broad prior corpus from {len(reports)} reports of {where} (imported).",
    )


def folder_reports(folder: Path) -> list[str]:
    """The text of every ``.txt`` report under ``folder`` (sorted by path)."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder of report .txt files")
    texts = []
    for path in sorted(folder.rglob("*.txt")):
        if path.is_file() and not path.name.startswith("."):
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    if not texts:
        raise ValueError(f"{folder}: no .txt reports found (MIMIC-CXR keeps them under files/)")
    return texts
