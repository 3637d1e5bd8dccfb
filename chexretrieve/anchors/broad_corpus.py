"""Build the broad clinical-text corpus (``anchors/broad/clinical-v1.yaml``), deterministically.

The corpus is the prior for posterior ("adapted") anchor models: chest findings, normal studies,
devices, and non-chest clinical language (abdomen, neuro, musculoskeletal, history and labs). It is
expanded from the hand-written parts in :mod:`chexretrieve.anchors.broad_parts`: every template's
combinations are enumerated in a fixed order and ``quota`` of them are drawn with ``random.Random``
seeded per template, so the same seed always gives the same file, byte for byte.

Regenerate (writes a new version only if the content changed and that version is free)::

    python -m chexretrieve.anchors.broad_corpus --check      # print statistics, write nothing
    python -m chexretrieve.anchors.broad_corpus --write      # save as anchors/broad/clinical-v1
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import string
from collections import Counter
from pathlib import Path

from chexretrieve.anchors.anchor_set import AnchorSentence, AnchorSet, AnchorSource
from chexretrieve.anchors.broad_parts import FIXED, SLOTS, TEMPLATES

#: the seed of the released corpus (clinical-v1)
DEFAULT_SEED = 20261129
CONTEXT = "broad/clinical"
_AN = re.compile(r"\b([Aa]) (?=[aeiou]|8\b|8 |11 |18 )")


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def _finish(sentence: str) -> str:
    """Articles and capitals: 'a ill-defined' -> 'an ill-defined', first letter upper case."""
    sentence = _AN.sub(lambda m: m.group(1) + "n ", sentence)
    sentence = " ".join(sentence.split())
    return sentence[0].upper() + sentence[1:]


def expand_template(template: str, quota: int, rng: random.Random) -> list[str]:
    """Draw ``quota`` distinct sentences from all slot combinations (all of them if fewer)."""
    names = _fields(template)
    for name in names:
        if name not in SLOTS:
            raise ValueError(f"template {template!r} uses unknown slot {name!r}")
    combos = list(itertools.product(*(SLOTS[name] for name in names)))
    chosen = combos if quota >= len(combos) else rng.sample(combos, quota)
    return [_finish(template.format(**dict(zip(names, combo, strict=True)))) for combo in chosen]


def build_broad_sentences(seed: int = DEFAULT_SEED) -> list[tuple[str, str, str]]:
    """``(text, polarity, category)`` in a fixed order, de-duplicated (first occurrence wins)."""
    rows: list[tuple[str, str, str]] = []
    for (category, polarity), sentences in FIXED.items():
        rows.extend((text, polarity, category) for text in sentences)
    for index, (category, polarity, template, quota) in enumerate(TEMPLATES):
        rng = random.Random(seed * 1000 + index)
        rows.extend((text, polarity, category) for text in expand_template(template, quota, rng))
    seen: set[str] = set()
    unique = []
    for text, polarity, category in rows:
        key = re.sub(r"\s+", " ", text).strip().rstrip(".!;").casefold()
        if key not in seen:
            seen.add(key)
            unique.append((text, polarity, category))
    return unique


def build_broad_corpus(seed: int = DEFAULT_SEED, version: int = 1) -> AnchorSet:
    """The corpus as an anchor set (context ``broad/clinical``); one source per category."""
    rows = build_broad_sentences(seed)
    categories = sorted({category for _, _, category in rows})
    sources = {
        category: AnchorSource(
            kind="template",
            prompt="chexretrieve/anchors/broad_corpus.py (parts: broad_parts.py beside it)",
            date="2026-11-29",
            parameters={"seed": seed, "category": category},
            note=(
                "Expanded by a seeded script from phrase parts written for this project in an "
                "LLM-assisted authoring session (Claude); no report corpus was used."
            ),
        )
        for category in categories
    }
    entries = [AnchorSentence(text, polarity, category) for text, polarity, category in rows]
    return AnchorSet.create(
        sentences=entries,
        source=sources,
        context=CONTEXT,
        version=version,
        created="2026-11-29",
        description=(
            "Broad clinical text, the prior for posterior anchor models: chest findings, normal "
            "studies, devices, abdomen, neuro, musculoskeletal, clinical history and labs. "
            "Positive = states an abnormality or presence, negative = normal or absent."
        ),
    )


def corpus_statistics(anchor_set: AnchorSet) -> dict[str, Counter]:
    by_category = Counter(e.source for e in anchor_set.entries)
    by_polarity = Counter(e.polarity for e in anchor_set.entries)
    return {"category": by_category, "polarity": by_polarity}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--root", type=Path, default=None, help="anchors folder (default: repo)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="print statistics only")
    action.add_argument("--write", action="store_true", help="save as a new version")
    args = parser.parse_args(argv)
    corpus = build_broad_corpus(args.seed, args.version)
    stats = corpus_statistics(corpus)
    print(f"{corpus.key}: {len(corpus)} sentences, {corpus.content_hash}")
    for name, counter in stats.items():
        print(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in sorted(counter.items())))
    if args.write:
        from chexretrieve.anchors.files import save_new_version

        print(f"saved {save_new_version(corpus, args.root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
