"""De-identification of report sentences for ``chexretrieve anchors import-reports``.

Three layers, each replacing what it finds by ``___`` (MIMIC-CXR's own mark):

1. **The archive's own identifiers, exactly** (:class:`ArchiveIdentifiers`): the patient ids,
   accession numbers, data-set study ids and study dates the store holds, and the person names
   of the studies' DICOM headers. Names and ids match as whole words in any case; a name's parts
   in any order ("SMITH^JOHN": "John Smith", "smith, john"); an id also by each of its parts that
   holds a digit (the fragment ``ACC2021-___`` of ``ACC2021-00042``); a date in every spelling
   that parses to it (``2021-03-12``, ``03/12/21``, ``12.03.2021``, ``20210312``,
   ``March 12th, 2021``, ``12-Mar-2021``).
2. **philter-lite** (the maintained fork of UCSF's Philter, BSD-3), its ``philter_delta`` rule set
   as shipped: ~300 regular expressions for dates, addresses, phone and fax numbers, e-mail
   addresses, URLs, IPs, ages over 89 and identifiers, name blacklists (97k first names, 161k last
   names) and a 195k-word safe list; a word that no safe rule keeps is removed. Philter tags
   parts of speech with nltk's perceptron tagger, whose data nltk downloads at run time; here
   that one step is replaced by :func:`rule_parts_of_speech` (capitalised -> proper noun, digits
   -> number), so nothing is downloaded.
3. **Project rules** (:func:`chexretrieve.anchors.report_corpus.scrub`, the dictation initials
   and the patterns below): dates, clock times, titled names, "JS/ab", whole URLs, e-mail and IP
   addresses, number chains (``62.74.7.6``, UIDs) and every number without a unit.

What gets through is measured, not assumed: ``benchmarks/phi_scrub.py`` plants identifiers of
every HIPAA Safe Harbor kind in synthetic reports and prints the recall per kind (figures in
``docs/phi.md``). A corpus from a scrubber with a different :attr:`PhiScrubber.version` is a
different corpus: the set records it.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata

from chexretrieve.anchors.report_corpus import BLANK, scrub

#: bumped whenever a rule of layers 1 or 3 changes (the set records it beside philter's version)
RULES_VERSION = 1
#: the philter-lite configuration used (shipped inside the package)
PHILTER_CONFIG = "philter_delta"

#: dictation signatures: radiologist's / typist's initials ("JS/ab", "JRS/kl")
_DICTATION_INITIALS = re.compile(r"\b[A-Z]{2,4}\s?/\s?[a-z]{2,4}\b")
#: web and mail addresses, removed whole (philter keeps a URL's path words it knows: "app/main")
_ADDRESSES = re.compile(
    r"\b(?:https?|ftp)://[^\s<>\"]+|\bwww\.[^\s<>\"]+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+",
    re.IGNORECASE,
)
#: IP addresses and other dotted or colon-separated number chains (IPv4, IPv6, DICOM UIDs); a
#: measurement has one decimal point at most
_NUMBER_CHAINS = re.compile(
    r"\b\d+(?:\.\d+){2,}\b|(?<![\w:])(?:[0-9a-f]{1,4}:){2,7}(?::|[0-9a-f]{1,4})(?![\w:])",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z0-9]+")
_REPEATED_BLANKS = re.compile(r"___(?:[\s,/.:;'-]*___)+")
_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ),  # fmt: skip
        start=1,
    )
    for name in names
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"
_DATE_CANDIDATES = re.compile(
    rf"\b\d{{1,4}}[-/.]\d{{1,2}}[-/.]\d{{1,4}}\b|\b\d{{8}}\b"
    rf"|\b\d{{1,2}}{_ORD}[\s-]+(?:of\s+)?(?:{_MONTH})\.?,?[\s-]+\d{{2,4}}\b"
    rf"|\b(?:{_MONTH})\.?[\s-]+\d{{1,2}}{_ORD},?[\s-]+\d{{2,4}}\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ArchiveIdentifiers:
    """What the archive itself knows about its patients, removed exactly from every report."""

    names: frozenset[str] = frozenset()  # person names as stored (DICOM PN: "SMITH^JOHN")
    ids: frozenset[str] = frozenset()  # patient ids, accession numbers, data-set study ids
    dates: frozenset[dt.date] = frozenset()  # study dates

    def __len__(self) -> int:
        return len(self.names) + len(self.ids) + len(self.dates)

    @property
    def name_words(self) -> frozenset[str]:
        """The names' parts (two letters or more), case-folded: each removed as a word."""
        out = set()
        for name in self.names:
            for word in re.findall(r"[^\W\d_]+(?:'[^\W\d_]+)*", name):
                out.update(p for p in [word, *word.split("'")] if len(p) >= 2)
        return frozenset(p.casefold() for p in out)

    @property
    def id_words(self) -> frozenset[str]:
        """The ids whole and their parts that hold a digit, case-folded."""
        out = set()
        for value in self.ids:
            value = value.strip()
            if len(value) >= 2:
                out.add(value.casefold())
            out.update(p.casefold() for p in _WORD.findall(value) if re.search(r"\d", p))
        return frozenset(p for p in out if len(p) >= 2)


def _parse_date(text: str) -> set[dt.date]:
    """Every calendar date ``text`` can be read as (day/month order unknown, 2-digit years)."""
    low = text.casefold()
    month_word = re.search(_MONTH, low)
    numbers = [int(n) for n in re.findall(r"\d+", re.sub(r"(\d)(?:st|nd|rd|th)\b", r"\1", low))]
    candidates: list[tuple[int, int, int]] = []
    if month_word and len(numbers) == 2:
        month = _MONTHS[month_word.group(0)]
        first, second = numbers
        candidates += [(second, month, first), (first, month, second)]
    elif len(numbers) == 1 and len(digits := re.sub(r"\D", "", low)) == 8:
        candidates += [(int(digits[:4]), int(digits[4:6]), int(digits[6:]))]
        candidates += [(int(digits[4:]), int(digits[:2]), int(digits[2:4]))]
    elif len(numbers) == 3:
        a, b, c = numbers
        candidates += [(a, b, c), (c, a, b), (c, b, a)]
    out = set()
    for year, month, day in candidates:
        if year < 100:
            year += 2000 if year < 70 else 1900
        try:
            out.add(dt.date(year, month, day))
        except ValueError:
            continue
    return out


def remove_archive_identifiers(text: str, identifiers: ArchiveIdentifiers) -> str:
    """Layer 1: the archive's names, ids and dates replaced by ``___`` (see the module)."""
    if identifiers.dates:
        text = _DATE_CANDIDATES.sub(
            lambda m: BLANK if _parse_date(m.group(0)) & identifiers.dates else m.group(0), text
        )
    words = identifiers.name_words | identifiers.id_words
    if not words:
        return text
    for whole in sorted((w for w in words if not w.isalnum()), key=len, reverse=True):
        text = re.sub(
            rf"(?<![A-Za-z0-9]){re.escape(whole)}(?![A-Za-z0-9])", BLANK, text, flags=re.I
        )

    def blank_if_known(match: re.Match) -> str:
        word = match.group(0).casefold()
        return BLANK if word in words or words.intersection(word.split("'")) else match.group(0)

    return re.sub(r"[^\W_]+(?:'[^\W_]+)*", blank_if_known, text)


def rule_parts_of_speech(tokens: list[str]) -> list[tuple[str, str]]:
    """Penn tags for philter's token list (words and whitespace runs): digits -> CD; a capitalised
    word -> NNP, except the sentence's first word when philter's safe list holds it (a capital
    from the sentence start, "Small", "Heart"); everything else -> NN."""
    safe = _philter()[1]
    tagged, first = [], True
    for token in tokens:
        if token.isspace():
            tagged.append((token, "SP"))
            continue
        if token.isdigit():
            tag = "CD"
        elif token[:1].isupper() and not (first and token.casefold() in safe):
            tag = "NNP"
        else:
            tag = "NN"
        tagged.append((token, tag))
        first = False
    return tagged


_PHILTER_LOCK = threading.Lock()


@cache
def _philter() -> tuple[list, frozenset[str]]:
    """philter-lite's filters (``philter_delta``) and its safe word list, loaded once (~5 s)."""
    import tomllib
    from importlib.resources import files

    import philter_lite
    from philter_lite import philter as philter_engine
    from philter_lite.filters import filter_db

    if not callable(getattr(philter_engine, "_get_pos", None)):
        raise RuntimeError(
            f"philter-lite {metadata.version('philter-lite')} has no part-of-speech step to "
            "replace; chexretrieve needs philter-lite 0.6 (see pyproject.toml)"
        )
    # the one replaced step: nltk's tagger would download its model at run time
    philter_engine._get_pos = lambda text: rule_parts_of_speech(philter_engine._get_clean(text))
    config = files(philter_lite) / "configs" / f"{PHILTER_CONFIG}.toml"
    filters = [
        philter_lite.filter_from_dict(f) for f in tomllib.loads(config.read_text())["filters"]
    ]
    return filters, frozenset(filter_db.set_db["nonames"])


def philter_removed_words(text: str) -> list[tuple[int, int]]:
    """Layer 2: (start, end) of every word philter-lite does not keep."""
    import philter_lite

    filters, _ = _philter()
    with _PHILTER_LOCK:
        include_map, _, _ = philter_lite.detect_phi(text, filters)
        kept = philter_lite.transform_text_asterisk(text, include_map)
    return [
        m.span()
        for m in _WORD.finditer(text)
        if any(kept[i] == "*" and text[i] != "*" for i in range(*m.span()))
    ]


def _blank_spans(text: str, spans: Iterable[tuple[int, int]]) -> str:
    out, last = [], 0
    for start, end in sorted(spans):
        out.append(text[last:start] + BLANK)
        last = end
    return "".join(out) + text[last:]


@dataclass
class PhiScrubber:
    """The three layers over one sentence at a time, each distinct sentence scrubbed once."""

    identifiers: ArchiveIdentifiers = field(default_factory=ArchiveIdentifiers)
    use_philter: bool = True  # False only to measure the other layers alone (benchmark)
    _memo: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return "chexretrieve.anchors.phi_scrub"

    @property
    def version(self) -> str:
        philter = (
            f"philter-lite {metadata.version('philter-lite')} ({PHILTER_CONFIG})"
            if self.use_philter
            else "no philter"
        )
        return f"rules {RULES_VERSION} + {philter} + {len(self.identifiers)} archive identifiers"

    def __call__(self, sentence: str) -> str:
        if sentence not in self._memo:
            self._memo[sentence] = self._scrub(sentence)
        return self._memo[sentence]

    def _scrub(self, text: str) -> str:
        text = remove_archive_identifiers(text, self.identifiers)
        text = _ADDRESSES.sub(BLANK, _DICTATION_INITIALS.sub(BLANK, text))
        text = _NUMBER_CHAINS.sub(BLANK, text)
        if self.use_philter:
            text = _blank_spans(text, philter_removed_words(text))
        return _REPEATED_BLANKS.sub(BLANK, scrub(text))


ScrubFunction = Callable[[str], str]
