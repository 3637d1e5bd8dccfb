"""The curation tab's actions (no Gradio): browse a finding's anchor sets, edit one as text, save
the edit as a new version (never overwriting), and measure the edit's impact on the archive.

Edit format, one sentence per line: ``+ sentence`` (positive) or ``- sentence`` (negative); blank
lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from chexretrieve.findings import canonical_finding
from chexretrieve.ui.render import esc

_PREFIX = {"+": "positive", "-": "negative"}
_SIGN = {"positive": "+", "negative": "-"}


def signed(value: float, digits: int = 4) -> str:
    """A signed number with one minus sign everywhere (U+2212, as typeset), never a hyphen."""
    text = f"{value:+.{digits}f}"
    return text.replace("-", "\u2212")


class NeedsConfirmation(ValueError):
    """Publishing an edit whose measured impact says it hurts: the curator confirms first."""


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

    def __init__(self, anchors_dir: Path | None = None, store=None, encoder=None, gallery=None,
                 published=None):  # fmt: skip
        self.anchors_dir = anchors_dir
        self.store = store
        self.encoder = encoder
        self._gallery = gallery  # callable returning a chexretrieve.search.gallery.Gallery
        # optional callable(finding): a version of the finding's set was published or reverted
        # (the archive index builds it, then serves it in place of the old one)
        self.published = published
        # (edited set's key, the edit's sentences) -> its measured harm, for publish to confirm
        self._hurts: dict[tuple, str] = {}

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

    def remember_hurt(self, before_key: str, after, report) -> None:
        """Keep that the edit ``after`` of ``before_key`` measurably hurts (a fact about the
        edit on this archive, shared by every session), for the publish confirmation."""
        hurts = self._hurts
        if len(hurts) >= 64:
            hurts.pop(next(iter(hurts)))
        hurts[(before_key, _content(after))] = (
            f"AUPRC {report.auprc_before:.3f} → {report.auprc_after:.3f}, change "
            f"{signed(report.delta, 3)}, 95 % interval {signed(report.delta_low, 3)} to "
            f"{signed(report.delta_high, 3)}"
        )

    def hurt_of(self, before_key: str, after) -> str | None:
        """The measured harm of this edit (None: not measured as hurting)."""
        return self._hurts.get((before_key, _content(after)))

    def impact_markdown(
        self, before_key: str, after_key: str, geometry: str = "softmax", top_k: int = 10
    ) -> str:
        """Escaped Markdown: AUPRC before / after the edit on the archive's labelled splits."""
        return self.impact_of(self.get(before_key), self.get(after_key), geometry, top_k)

    def impact_of(self, before, after, geometry: str = "softmax", top_k: int = 10,
                  after_name: str | None = None) -> str:  # fmt: skip
        """Escaped Markdown: the impact of ``after`` (an AnchorSet, published or not) against
        ``before``, with the change's 95 % bootstrap interval over the queries."""
        from chexretrieve.anchors.config import ImpactConfig
        from chexretrieve.anchors.curation import measure_impact

        if self.encoder is None or self._gallery is None:
            raise ValueError("impact needs an archive and its encoder; none is loaded")
        gallery = self._gallery()
        labels = gallery.label_values(before.finding)
        codes, uniques = gallery.columns.codes("split")
        named = {str(u): i for i, u in enumerate(uniques)}
        is_key = codes == named.get("train", -2)
        is_query = codes == named.get("valid", -2)
        if not is_key.any() or not is_query.any():
            raise ValueError(
                f"impact needs labelled 'train' keys and 'valid' queries; the archive has "
                f"{int(is_key.sum())} and {int(is_query.sum())}"
            )
        report = measure_impact(
            before,
            after,
            self.encoder,
            gallery.embedding_rows(np.flatnonzero(is_key)),
            labels[is_key],
            gallery.embedding_rows(np.flatnonzero(is_query)),
            labels[is_query],
            ImpactConfig(geometry=geometry, top_k=top_k, show_queries=5),
            key_ids=gallery.image_ids[is_key],
            query_ids=gallery.image_ids[is_query],
            store=self.store,
        )
        name = after_name or report.after
        if report.settled and report.delta < 0:
            self.remember_hurt(before.key, after, report)
        lines = [
            f"**Impact of {esc(report.before)} → {esc(name)}** on {esc(report.finding)} "
            f"({esc(report.geometry)} geometry; {report.n_queries} positive 'valid' queries, "
            f"{report.n_keys} 'train' keys of which {report.n_relevant_keys} positive)",
            "",
            "| | AUPRC |",
            "|---|---:|",
            f"| before ({esc(report.before)}) | {report.auprc_before:.4f} |",
            f"| after ({esc(name)}) | {report.auprc_after:.4f} |",
            f"| change | {signed(report.delta)} |",
            f"| 95 % interval of the change | {signed(report.delta_low)} to "
            f"{signed(report.delta_high)} |",
            f"| cosine (no anchors) | {report.auprc_cosine:.4f} |",
            "",
            (
                "The interval excludes zero: on these queries the edit measurably "
                + ("helps." if report.delta > 0 else "hurts.")
                if report.settled
                else "The interval includes zero: on these queries the edit's effect is not "
                "distinguishable from no change (bootstrap over the queries)."
            ),
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


def _content(anchor_set) -> tuple:
    return tuple(zip(anchor_set.sentences, anchor_set.polarities, strict=True))


class DraftDesk(CurationDesk):
    """Curation with drafts: save a draft, measure it against the version it was edited from,
    publish it (curator role, ``chexretrieve.ui.roles.may_publish``), revert a set to an older
    version (see ``chexretrieve.anchors.drafts``)."""

    def _book(self):
        from chexretrieve.anchors import anchors_root
        from chexretrieve.anchors.drafts import DraftBook

        return DraftBook(Path(self.anchors_dir) if self.anchors_dir else anchors_root())

    def edited(self, key: str, text: str, description: str = ""):
        """(base set, the edit as its unpublished next version); ValueError for a bad line or an
        invalid set."""
        from chexretrieve.anchors import format_anchor_set
        from chexretrieve.anchors.files import parse_anchor_text

        base = self.get(key)
        pairs = parse_edit_text(text)
        revised = base.revised(sentences=pairs, description=description.strip() or None)
        report = parse_anchor_text(format_anchor_set(revised), revised.relative_path())
        if report.errors:
            raise ValueError(
                "the edit is not a valid anchor set:\n"
                + "\n".join(f"- {p.message}" for p in report.errors)
            )
        return base, revised

    def draft_of(self, key: str):
        """The saved draft of ``key``'s set id, if any."""
        return self._book().get(self.get(key).id) if key else None

    def save_draft(self, key: str, text: str, description: str = "", user: str | None = None):
        """Save the edit as the draft of ``key``'s set (replacing an older draft); (draft, the
        problems that would stop its publication)."""
        from chexretrieve.anchors.drafts import publish_problems

        base, revised = self.edited(key, text, description)
        pairs = list(zip(revised.sentences, revised.polarities, strict=True))
        draft = self._book().save(base, pairs, description, user or "anonymous")
        return draft, publish_problems(pairs, base.finding)

    def draft_impact(self, key: str, text: str, geometry: str = "softmax") -> str:
        """Markdown: the impact of the edit in the box (saved or not) against ``key``."""
        base, revised = self.edited(key, text)
        if list(revised.sentences) == list(base.sentences) and list(revised.polarities) == list(
            base.polarities
        ):
            previous = self.previous_key(key)
            if previous is None:
                raise ValueError(
                    f"{key} is unchanged and has no earlier version: edit it, then measure"
                )
            return self.impact_of(self.get(previous), base, geometry)
        return self.impact_of(base, revised, geometry, after_name=f"the edit of {key}")

    def publish(
        self, key: str, text: str, description: str = "", user: str | None = None,
        confirmed: bool = False,
    ):  # fmt: skip
        """Publish the edit as the next version of ``key``'s set id (a curator's action);
        ValueError when ``user`` may not, or when the edit is not publishable;
        NeedsConfirmation when its measured impact says it hurts and it is not ``confirmed``."""
        from chexretrieve.anchors import diff_anchor_sets, save_new_version
        from chexretrieve.anchors.drafts import publish_problems
        from chexretrieve.ui.roles import may_publish

        if not may_publish(user):
            raise ValueError(f"{user or 'this user'} may not publish anchor sets (curator role)")
        base, revised = self.edited(key, text, description)
        pairs = list(zip(revised.sentences, revised.polarities, strict=True))
        problems = publish_problems(pairs, base.finding)
        if problems:
            raise ValueError("not published: " + " · ".join(problems))
        harm = self.hurt_of(base.key, revised)
        if harm is not None and not confirmed:
            raise NeedsConfirmation(
                f"Not published yet: the impact measured for this edit says it measurably hurts "
                f"({harm}). Publish it anyway with “Publish anyway”, or change the edit."
            )
        newest = max((s for s in self.sets(base.finding) if s.id == base.id),
                     key=lambda s: s.version)  # fmt: skip
        if pairs == list(zip(newest.sentences, newest.polarities, strict=True)):
            raise ValueError(f"nothing changed: the text is exactly {newest.key}; edit it first")
        final = newest.revised(sentences=pairs, description=description.strip() or None)
        path = save_new_version(final, self.anchors_dir)
        self._book().discard(base.id)
        if self.published is not None:
            self.published(base.finding)
        summary = diff_anchor_sets(base, final).summary()
        return SavedVersion(final.key, path, f"{summary} (edited from {base.key})", ())

    def revert(self, key: str, user: str | None = None):
        """Publish the sentences of the older version ``key`` as its set's next version."""
        from chexretrieve.ui.roles import may_publish

        if not may_publish(user):
            raise ValueError(f"{user or 'this user'} may not revert anchor sets (curator role)")
        chosen = self.get(key)
        newest = max((s for s in self.sets(chosen.finding) if s.id == chosen.id),
                     key=lambda s: s.version)  # fmt: skip
        if newest.key == chosen.key:
            raise ValueError(f"{key} is the latest version already; choose an older one")
        saved = self.publish(newest.key, set_as_text(chosen), f"revert to {chosen.key}", user,
                             confirmed=True)  # fmt: skip
        summary = (
            f"a new version that restores the sentences of {chosen.key} (replacing "
            f"{newest.key}, which stays in the history)"
        )
        return replace(saved, summary=summary)
