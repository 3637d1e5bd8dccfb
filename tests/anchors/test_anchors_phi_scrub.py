"""The de-identification layers of ``anchors import-reports`` (chexretrieve.anchors.phi_scrub).

The archive's own identifiers are removed exactly by layer 1 alone (philter off), in any case and
order; the dates are written with ``datetime.strftime`` here, not with the scrubber's parser.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from phi_corpus import CLINICAL, make_corpus, recall_by_kind

from chexretrieve.anchors.phi_scrub import (
    ArchiveIdentifiers,
    PhiScrubber,
    remove_archive_identifiers,
)
from chexretrieve.anchors.report_corpus import scrub as rules_only

DAY = dt.date(2021, 3, 12)
ARCHIVE = ArchiveIdentifiers(
    names=frozenset({"O'BRIEN^MARY^ANN", "HILL^JOHN"}),
    ids=frozenset({"ACC2021-00042", "PT7734", "s50414267"}),
    dates=frozenset({DAY}),
)
SPELLINGS = (
    "%Y-%m-%d", "%m/%d/%Y", "%d.%m.%Y", "%Y%m%d", "%B %d, %Y", "%d %B %Y", "%b %d %Y",
    "%d-%b-%Y", "%m/%d/%y", "%d %b. %Y",
)  # fmt: skip


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_archives_dates_go_in_every_spelling(spelling):
    written = DAY.strftime(spelling)
    sentence = f"Compared with the film of {written}, smaller effusion."
    assert remove_archive_identifiers(sentence, ARCHIVE) == (
        "Compared with the film of ___, smaller effusion."
    )
    assert written not in PhiScrubber(ARCHIVE, use_philter=False)(sentence)
    other = dt.date(2021, 3, 13).strftime(spelling)  # exact: another day is not the archive's
    assert remove_archive_identifiers(f"Seen {other}.", ARCHIVE) == f"Seen {other}."


@pytest.mark.parametrize(
    "text",
    [
        "Mary O'Brien has a small effusion.", "OBRIEN? no: o'brien, mary ann at the bedside.",
        "Discussed with HILL, JOHN.", "Patient john hill, pt7734, acc2021-00042.",
        "Prior study ACC2021-___ compared.", "Study s50414267 compared.",
    ],
)  # fmt: skip
def test_the_archives_names_and_ids_go_in_any_case_and_order(text):
    out = PhiScrubber(ARCHIVE, use_philter=False)(text).casefold()
    for word in ("mary", "o'brien", "brien", "ann", "hill", "john", "pt7734", "acc2021"):
        assert not re.search(rf"(?<![\w']){re.escape(word)}(?![\w'])", out), (text, out)


def test_whole_words_only_clinical_words_that_contain_a_name_stay():
    out = PhiScrubber(ARCHIVE, use_philter=False)("Bilateral hilar adenopathy; Hill-Sachs.")
    assert out.startswith("Bilateral hilar adenopathy")


def test_the_full_scrubber_removes_what_the_rules_alone_let_through():
    """Main's rule scrub kept untitled names, e-mail, initials and fragments (the audit's
    findings); the full scrubber removes every planted identifier of this corpus."""
    corpus = make_corpus(52, seed=3)
    full = PhiScrubber(ArchiveIdentifiers(**corpus.archive))
    recall = recall_by_kind(corpus, [full(r) for r in corpus.reports])
    assert {kind: leaks for kind, (_, _, leaks) in recall.items() if leaks} == {}
    before = recall_by_kind(corpus, [rules_only(r) for r in corpus.reports])
    for kind in ("name without title", "e-mail", "initials", "identifier fragment"):
        removed, planted, _ = before[kind]
        assert removed < planted, kind


def test_clinical_text_is_kept_and_nothing_is_downloaded(monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [])  # a tagger model would have to come from here
    scrubber = PhiScrubber()
    kept = [scrubber(s) for s in CLINICAL]
    pairs = list(zip(CLINICAL, kept, strict=True))
    words = [w for s in CLINICAL for w in re.findall(r"[A-Za-z]{2,}", s)]
    lost = sum(w not in re.findall(r"[A-Za-z]{2,}", k) for s, k in pairs for w in re.findall(
        r"[A-Za-z]{2,}", s))  # fmt: skip
    assert lost / len(words) <= 0.02, [k for s, k in pairs if s != k]
    assert "4 cm above the carina" in scrubber("Endotracheal tube tip lies 4 cm above the carina.")
    assert scrubber.version.startswith("rules 1 + philter-lite 0.6.0 (philter_delta)")
