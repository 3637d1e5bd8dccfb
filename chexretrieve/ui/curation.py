"""The curation tab's actions (no Gradio): browse a finding's anchor sets, edit one as text, save
the edit as a new version (never overwriting), and measure the edit's impact on the archive.

Edit format, one sentence per line: ``+ sentence`` (positive) or ``- sentence`` (negative); blank
lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chexretrieve.findings import canonical_finding
from chexretrieve.ui.render import esc

_PREFIX = {"+": "positive", "-": "negative"}
_SIGN = {"positive": "+", "negative": "-"}


def set_as_text(anchor_set) -> str:
    """The set's sentences in the edit format."""
    return "\n".join(f"{_SIGN[e.polarity]} {e.text}" for e in anchor_set.entries)


def parse_edit_text(text: str) -> list[tuple[str, str]]:
    """(sentence, polarity) pairs from the edit format; ValueError naming the first bad line."""
    pairs = []
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        sign, sentence = line[0], line[1:].strip()
        if sign not in _PREFIX:
            raise ValueError(
                f"line {number} must start with '+' (positive) or '-' (negative): {line[:60]!r}"
            )
        if not sentence:
            raise ValueError(f"line {number} has a '{sign}' but no sentence; delete the line")
        pairs.append((sentence, _PREFIX[sign]))
    if not pairs:
        raise ValueError("the edit holds no sentences; an anchor set needs at least one")
    return pairs


def sentences_html(anchor_set) -> str:
    """The set's sentences as an escaped HTML table with polarity and source."""
    rows = "".join(
        f"<tr><td>{i}</td><td><span class='cx-label cx-{e.polarity}'>{e.polarity}</span></td>"
        f"<td class='cx-text'>{esc(e.text)}</td><td>{esc(e.source)}</td></tr>"
        for i, e in enumerate(anchor_set.entries, start=1)
    )
    positives = anchor_set.polarities.count("positive")
    head = (
        f"<p><b>{esc(anchor_set.key)}</b> · {len(anchor_set)} sentences ({positives} positive, "
        f"{len(anchor_set) - positives} negative) · created {esc(anchor_set.created)}"
        f"{' · ' + esc(anchor_set.description) if anchor_set.description else ''}</p>"
    )
    return (
        head + "<div class='cx-scroll'><table class='cx-hits cx-sentences'><thead><tr><th>#</th>"
        "<th>polarity</th><th>sentence</th><th>source</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


@dataclass(frozen=True)
class SavedVersion:
    # id@version of the new set
    key: str
    # file written (under the anchors folder)
    path: Path
    # one line: what changed against the set it was made from
    summary: str
    # validator warnings (balance, size); saving went ahead
    warnings: tuple[str, ...]


class CurationDesk:
    """Anchor-set curation over one anchors folder, with impact measured on one archive."""

    def __init__(self, anchors_dir: Path | None = None, store=None, encoder=None, gallery=None):
        self.anchors_dir = anchors_dir
        self.store = store
        self.encoder = encoder
        self._gallery = gallery  # callable returning a chexretrieve.search.gallery.Gallery

    def sets(self, finding: str) -> list:
        from chexretrieve.anchors import find_anchor_sets

        found = find_anchor_sets(self.anchors_dir, finding=canonical_finding(finding))
        return sorted(found, key=lambda s: (s.variant or "", -s.version))

    def set_choices(self, finding: str) -> list[str]:
        """id@version of every set of the finding, each variant newest first."""
        return [s.key for s in self.sets(finding)]

    def get(self, key: str):
        from chexretrieve.anchors import resolve_anchor_set

        if not key:
            raise ValueError("choose an anchor set first")
        return resolve_anchor_set(key, self.anchors_dir)

    def previous_key(self, key: str) -> str | None:
        """The version just before ``key`` of the same set id, if any."""
        current = self.get(key)
        older = [
            s
            for s in self.sets(current.finding)
            if s.id == current.id and s.version < current.version
        ]
        return max(older, key=lambda s: s.version).key if older else None

    def save_edit(self, key: str, text: str, description: str = "") -> SavedVersion:
        """Save the edited sentences as the next version of ``key``'s set id (never overwrites)."""
        from chexretrieve.anchors import diff_anchor_sets, format_anchor_set, save_new_version
        from chexretrieve.anchors.files import parse_anchor_text

        chosen = self.get(key)
        pairs = parse_edit_text(text)
        same_id = [s for s in self.sets(chosen.finding) if s.id == chosen.id]
        newest = max(same_id, key=lambda s: s.version)
        if pairs == list(zip(newest.sentences, newest.polarities, strict=True)):
            raise ValueError(f"nothing changed: the text is exactly {newest.key}; edit it first")
        revised = newest.revised(sentences=pairs, description=description.strip() or None)
        report = parse_anchor_text(format_anchor_set(revised), revised.relative_path())
        if report.errors:
            raise ValueError(
                "the edit is not a valid anchor set:\n"
                + "\n".join(f"- {p.message}" for p in report.errors)
            )
        path = save_new_version(revised, self.anchors_dir)
        summary = diff_anchor_sets(chosen, revised).summary()
        return SavedVersion(revised.key, path, summary, tuple(p.message for p in report.warnings))

    def impact_markdown(
        self, before_key: str, after_key: str, geometry: str = "softmax", top_k: int = 10
    ) -> str:
        """Escaped Markdown: AUPRC before / after the edit on the archive's labelled splits."""
        from chexretrieve.anchors.config import ImpactConfig
        from chexretrieve.anchors.curation import measure_impact

        if self.encoder is None or self._gallery is None:
            raise ValueError("impact needs an archive and its encoder; none is loaded")
        before, after = self.get(before_key), self.get(after_key)
        gallery = self._gallery()
        labels = gallery.labels[before.finding].to_numpy(dtype=float)
        split = gallery.metadata["split"].astype(str).to_numpy()
        is_key, is_query = split == "train", split == "valid"
        if not is_key.any() or not is_query.any():
            raise ValueError(
                f"impact needs labelled 'train' keys and 'valid' queries; the archive has "
                f"{int(is_key.sum())} and {int(is_query.sum())}"
            )
        report = measure_impact(
            before,
            after,
            self.encoder,
            gallery.embeddings[is_key],
            labels[is_key],
            gallery.embeddings[is_query],
            labels[is_query],
            ImpactConfig(geometry=geometry, top_k=top_k, show_queries=5),
            key_ids=gallery.image_ids[is_key],
            query_ids=gallery.image_ids[is_query],
            store=self.store,
        )
        sign = "+" if report.delta >= 0 else "−"
        lines = [
            f"**Impact of {esc(report.before)} → {esc(report.after)}** on {esc(report.finding)} "
            f"({esc(report.geometry)} geometry; {report.n_queries} positive 'valid' queries, "
            f"{report.n_keys} 'train' keys of which {report.n_relevant_keys} positive)",
            "",
            "| | AUPRC |",
            "|---|---:|",
            f"| before ({esc(report.before)}) | {report.auprc_before:.4f} |",
            f"| after ({esc(report.after)}) | {report.auprc_after:.4f} |",
            f"| change | {sign}{abs(report.delta):.4f} |",
            f"| cosine (no anchors) | {report.auprc_cosine:.4f} |",
            "",
            f"Mean top-{report.top_k} overlap before / after: {report.mean_overlap:.2f}.",
        ]
        if report.most_changed:
            lines += [
                "",
                "| query case | top-k overlap | AP before | AP after |",
                "|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {esc(c.query)} | {c.overlap:.2f} | {c.ap_before:.3f} | {c.ap_after:.3f} |"
                for c in report.most_changed
            ]
        return "\n".join(lines)
