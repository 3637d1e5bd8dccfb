"""What changed between two anchor sets: added, removed, reworded and polarity-flipped sentences."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from chexretrieve.anchors.anchor_set import AnchorSet

#: two sentences at least this similar (difflib ratio on words) count as one reworded sentence
REWORD_SIMILARITY = 0.6


@dataclass(frozen=True)
class ChangedSentence:
    old_text: str
    new_text: str
    old_polarity: str
    new_polarity: str
    #: word-level similarity in [0, 1]
    similarity: float


@dataclass(frozen=True)
class AnchorSetDiff:
    old_key: str
    new_key: str
    added: tuple[tuple[str, str], ...]  # (text, polarity) only in the new set
    removed: tuple[tuple[str, str], ...]  # (text, polarity) only in the old set
    changed: tuple[ChangedSentence, ...]  # reworded sentences (paired by similarity)
    polarity_flipped: tuple[tuple[str, str, str], ...]  # (text, old polarity, new polarity)
    unchanged: int
    reordered: bool
    metadata: tuple[tuple[str, str, str], ...]  # (field, old, new) for description, finding, ...

    @property
    def same_content(self) -> bool:
        return not (self.added or self.removed or self.changed or self.polarity_flipped)

    def summary(self) -> str:
        parts = [
            f"{len(self.added)} added",
            f"{len(self.removed)} removed",
            f"{len(self.changed)} reworded",
            f"{len(self.polarity_flipped)} polarity changes",
            f"{self.unchanged} unchanged",
        ]
        if self.reordered:
            parts.append("order changed")
        return f"{self.old_key} -> {self.new_key}: " + ", ".join(parts)

    def to_dict(self) -> dict:
        return {
            "old": self.old_key,
            "new": self.new_key,
            "added": [{"text": t, "polarity": p} for t, p in self.added],
            "removed": [{"text": t, "polarity": p} for t, p in self.removed],
            "changed": [c.__dict__ for c in self.changed],
            "polarity_flipped": [
                {"text": t, "old": o, "new": n} for t, o, n in self.polarity_flipped
            ],
            "unchanged": self.unchanged,
            "reordered": self.reordered,
            "metadata": [{"field": f, "old": o, "new": n} for f, o, n in self.metadata],
        }


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.lower().split(), b.lower().split()).ratio()


def diff_anchor_sets(old: AnchorSet, new: AnchorSet) -> AnchorSetDiff:
    """Compare by sentence text; unmatched pairs at least REWORD_SIMILARITY alike are rewordings."""
    old_pol = {e.text: e.polarity for e in old.entries}
    new_pol = {e.text: e.polarity for e in new.entries}
    common = [t for t in old_pol if t in new_pol]
    flipped = tuple((t, old_pol[t], new_pol[t]) for t in common if old_pol[t] != new_pol[t])
    only_old = [(e.text, e.polarity) for e in old.entries if e.text not in new_pol]
    only_new = [(e.text, e.polarity) for e in new.entries if e.text not in old_pol]

    candidates = sorted(
        (
            (_similarity(a_text, b_text), i, j)
            for i, (a_text, _) in enumerate(only_old)
            for j, (b_text, _) in enumerate(only_new)
        ),
        key=lambda c: (-c[0], c[1], c[2]),
    )
    used_old: set[int] = set()
    used_new: set[int] = set()
    changed = []
    for score, i, j in candidates:
        if score < REWORD_SIMILARITY:
            break
        if i in used_old or j in used_new:
            continue
        used_old.add(i)
        used_new.add(j)
        changed.append(
            ChangedSentence(only_old[i][0], only_new[j][0], only_old[i][1], only_new[j][1], score)
        )
    changed.sort(key=lambda c: [t for t, _ in only_old].index(c.old_text))

    old_order = [t for t in (e.text for e in old.entries) if t in new_pol]
    new_order = [t for t in (e.text for e in new.entries) if t in old_pol]
    metadata = tuple(
        (name, str(getattr(old, name)), str(getattr(new, name)))
        for name in ("finding", "context", "variant", "description")
        if getattr(old, name) != getattr(new, name)
    )
    return AnchorSetDiff(
        old_key=old.key,
        new_key=new.key,
        added=tuple(p for j, p in enumerate(only_new) if j not in used_new),
        removed=tuple(p for i, p in enumerate(only_old) if i not in used_old),
        changed=tuple(changed),
        polarity_flipped=flipped,
        unchanged=len(common) - len(flipped),
        reordered=old_order != new_order,
        metadata=metadata,
    )


def _word_markup(old: str, new: str) -> tuple[str, str]:
    """Rich markup of a word-level diff: deletions red struck through, insertions green."""
    from rich.markup import escape

    a, b = old.split(), new.split()
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b).get_opcodes():
        old_words, new_words = escape(" ".join(a[i1:i2])), escape(" ".join(b[j1:j2]))
        if op == "equal":
            left.append(old_words)
            right.append(new_words)
            continue
        if old_words:
            left.append(f"[red strike]{old_words}[/]")
        if new_words:
            right.append(f"[green bold]{new_words}[/]")
    return " ".join(left), " ".join(right)


def render_diff(diff: AnchorSetDiff, console=None) -> None:
    """Print a diff as rich tables (used by ``chexretrieve anchors diff``)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]{escape(diff.summary())}[/]")
    for name, before, after in diff.metadata:
        console.print(f"  {name}: [red]{escape(before)}[/] -> [green]{escape(after)}[/]")
    if diff.added or diff.removed:
        table = Table(title="added / removed sentences", show_lines=False, expand=True)
        table.add_column("", width=1)
        table.add_column("polarity", width=8)
        table.add_column("sentence")
        for text, polarity in diff.removed:
            table.add_row("[red]-[/]", polarity, f"[red]{escape(text)}[/]")
        for text, polarity in diff.added:
            table.add_row("[green]+[/]", polarity, f"[green]{escape(text)}[/]")
        console.print(table)
    if diff.changed:
        table = Table(title="reworded sentences", expand=True)
        table.add_column("before")
        table.add_column("after")
        table.add_column("sim", justify="right", width=4)
        for change in diff.changed:
            left, right = _word_markup(change.old_text, change.new_text)
            if change.old_polarity != change.new_polarity:
                left += f" [dim]({change.old_polarity})[/]"
                right += f" [yellow]({change.new_polarity})[/]"
            table.add_row(left, right, f"{change.similarity:.2f}")
        console.print(table)
    if diff.polarity_flipped:
        table = Table(title="polarity changes", expand=True)
        table.add_column("sentence")
        table.add_column("before", width=8)
        table.add_column("after", width=8)
        for text, before, after in diff.polarity_flipped:
            table.add_row(escape(text), before, f"[yellow]{after}[/]")
        console.print(table)
