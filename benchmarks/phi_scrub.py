"""De-identification of ``anchors import-reports``, measured: recall per PHI kind, false removals.

Synthetic reports (``tests/anchors/phi_corpus.py``: Faker's identifiers of every HIPAA Safe Harbor
kind that a report's text can hold, plus the archive's own names, ids, accessions and dates, in
FINDINGS / IMPRESSION beside clinical sentences) go through the import's sentence pipeline
(``report_sentences``) with three scrubbers:

* ``main's rules``: the rule scrub alone (what main used before issue 33);
* ``archive + rules``: the archive's identifiers removed exactly and all our rules (no philter);
* ``full``: what ``import-reports`` runs (archive identifiers, philter-lite, rules).

Recall of a kind = planted identifiers of which no identifying word is left in that report's
output. False removal = alphabetic words of PHI-free clinical text lost, on the corpus's clinical
sentences, a sample of the shipped ``broad/clinical`` corpus and of the finding anchor sets.
Throughput: distinct sentences scrubbed per second (``full``), with the load average.

    .venv/bin/python benchmarks/phi_scrub.py                 # 520 reports (20 per kind), seed 1
    .venv/bin/python benchmarks/phi_scrub.py --reports 1040 --seed 2
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "anchors"))

from phi_corpus import ARCHIVE_KINDS, CLINICAL, KINDS, make_corpus, recall_by_kind  # noqa: E402

from chexretrieve.anchors.files import find_anchor_sets, latest_variants  # noqa: E402
from chexretrieve.anchors.phi_scrub import ArchiveIdentifiers, PhiScrubber  # noqa: E402
from chexretrieve.anchors.report_corpus import report_sentences, scrub  # noqa: E402

_WORD = re.compile(r"[A-Za-z]{2,}")


def false_removal(scrubber, sentences: list[str]) -> tuple[float, float, list[str]]:
    """(share of words lost, share of sentences changed, the most often lost words)."""
    lost: dict[str, int] = {}
    total = changed = 0
    for sentence in sentences:
        out = scrubber(sentence)
        changed += out != sentence
        left = _WORD.findall(out)
        for word in _WORD.findall(sentence):
            total += 1
            if word in left:
                left.remove(word)
            else:
                lost[word.lower()] = lost.get(word.lower(), 0) + 1
    top = sorted(lost, key=lambda w: -lost[w])[:8]
    return sum(lost.values()) / max(total, 1), changed / max(len(sentences), 1), top


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=520, help="synthetic reports (2 PHI each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clinical-sample", type=int, default=2000, help="sentences per sample")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    corpus = make_corpus(args.reports, seed=args.seed)
    identifiers = ArchiveIdentifiers(**corpus.archive)
    scrubbers = {
        "main's rules": scrub,
        "archive + rules": PhiScrubber(identifiers, use_philter=False),
        "full": PhiScrubber(identifiers),
    }
    started = time.perf_counter()
    scrubbers["full"]("warm up")  # philter-lite's rule files load once (a few seconds)
    load_s = time.perf_counter() - started
    recalls, seconds = {}, {}
    for name, scrubber in scrubbers.items():
        started = time.perf_counter()
        out = [" ".join(report_sentences(r, scrub_sentence=scrubber)) for r in corpus.reports]
        seconds[name] = time.perf_counter() - started
        recalls[name] = recall_by_kind(corpus, out)
    print(
        f"{args.reports} synthetic reports (seed {args.seed}), {len(corpus.planted)} planted "
        f"identifiers; scrubber {scrubbers['full'].version}; load average {load:.1f}"
    )
    print(f"\n| kind | planted | {' | '.join(scrubbers)} |")
    print("|---|---|" + "---|" * len(scrubbers))
    for kind in KINDS + ARCHIVE_KINDS:
        planted = recalls["full"][kind][1]
        cells = [f"{recalls[n][kind][0] / planted:.2f}" for n in scrubbers]
        print(f"| {kind} | {planted} | {' | '.join(cells)} |")
    totals = []
    for name in scrubbers:
        removed = sum(r[0] for r in recalls[name].values())
        totals.append(f"{removed / len(corpus.planted):.3f}")
    print(f"| **all** | {len(corpus.planted)} | {' | '.join(totals)} |")
    for kind, (_, _, leaks) in recalls["full"].items():
        for value, left in leaks[:3]:
            print(f"  left by full: {kind}: {value!r} -> {left}")
    rng = random.Random(args.seed)
    broad = list(latest_variants("broad/clinical")[0].sentences)
    findings = [s for a in find_anchor_sets() if a.finding for s in a.sentences]
    samples = {
        "corpus clinical sentences": list(CLINICAL),
        "broad/clinical sample": rng.sample(broad, min(args.clinical_sample, len(broad))),
        "finding anchor sets sample": rng.sample(
            findings, min(args.clinical_sample, len(findings))
        ),
    }
    print("\n| clinical text (no PHI) | sentences | words lost | sentences changed | most lost |")
    print("|---|---|---|---|---|")
    for name, sentences in samples.items():
        words, changed, top = false_removal(PhiScrubber(), sentences)
        print(f"| {name} | {len(sentences)} | {words:.2%} | {changed:.1%} | {', '.join(top)} |")
    distinct = len(scrubbers["full"]._memo)
    print(
        f"\nfull: {distinct} distinct sentences in {seconds['full']:.1f} s "
        f"({distinct / seconds['full']:.0f} per second; rule files loaded in {load_s:.1f} s); "
        f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
