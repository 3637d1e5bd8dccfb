"""The case lookup's state in the page address (issue 24, defect 8), and the page's keyboard and
history behaviour.

After each search the results carry the address of that search (``data-url`` on the results'
root: query case, finding, geometry, anchor set, free text and filters); the page writes it into
the address bar (``history.replaceState``), so a refresh or a copied link opens the same case
with the same settings and searches again (``settings_from_url``). An uploaded query is not in
the address (its pixels never leave the server): a link to it restores the settings only.

``PAGE_JS`` also closes an open dropdown list when Tab leaves it, and makes the browser's Back
button close the compare viewer instead of leaving the app (opening the viewer pushes a history
entry; Back pops it and closes the viewer).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from chexretrieve.ui.handlers import AGE_ANY, QueryImage, SearchSettings

#: address parameters, in the order they are written
PARAMETERS = (
    "case", "finding", "geometry", "set", "text", "view", "sex", "age_from", "age_to",
    "date_from", "date_to", "labelled",
)  # fmt: skip


def search_url(
    query: QueryImage | None, settings: SearchSettings, latest_set: str | None = None
) -> str:
    """``?case=5&finding=Edema&geometry=softmax&...``: the address of this search (parameters at
    their defaults are left out; an upload has no ``case``; the anchor set only when it is not
    ``latest_set``, so a link follows the finding's latest set unless another was chosen)."""
    pairs: list[tuple[str, str]] = []
    if query is not None and query.source == "case" and query.case_id is not None:
        pairs.append(("case", str(int(query.case_id))))
    pairs += [("finding", settings.finding), ("geometry", settings.geometry)]
    if settings.anchor_set and settings.anchor_set != latest_set:
        pairs.append(("set", settings.anchor_set))
    if (settings.text or "").strip():
        pairs.append(("text", settings.text.strip()))
    f = settings.filters
    pairs += [("view", v) for v in f.views]
    if f.sex:
        pairs.append(("sex", f.sex))
    if f.age_min is not None:
        pairs.append(("age_from", f"{f.age_min:g}"))
    if f.age_max is not None:
        pairs.append(("age_to", f"{f.age_max:g}"))
    if f.date_from:
        pairs.append(("date_from", f.date_from.isoformat()))
    if f.date_to:
        pairs.append(("date_to", f.date_to.isoformat()))
    if f.label_known:
        pairs.append(("labelled", "1"))
    return "?" + urllib.parse.urlencode(pairs)


@dataclass(frozen=True)
class UrlSettings:
    """The widget values an address asks for (None: the parameter is absent, keep the widget)."""

    case: str | None = None
    finding: str | None = None
    geometry: str | None = None
    anchor_set: str | None = None
    text: str | None = None
    views: tuple[str, ...] | None = None
    sex: str | None = None
    age_min: float | None = None
    age_max: float | None = None
    date_from: str | None = None
    date_to: str | None = None
    label_known: bool | None = None

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in self.__dataclass_fields__)


def settings_from_url(params: Mapping[str, object] | None) -> UrlSettings:
    """What the address's parameters ask for. Values are checked where they are used (a bad case
    id or date is the usual message on the page); an unknown parameter is ignored."""
    if not params:
        return UrlSettings()

    def one(name: str) -> str | None:
        value = params.get(name)
        if isinstance(value, list | tuple):
            value = value[-1] if value else None
        return None if value is None or str(value).strip() == "" else str(value).strip()

    def many(name: str) -> tuple[str, ...] | None:
        getter = getattr(params, "getlist", None)
        values = getter(name) if getter else params.get(name)
        if values is None or values == []:
            return None
        if isinstance(values, str):
            values = [values]
        return tuple(str(v) for v in values if str(v).strip())

    def age(name: str) -> float | None:
        value = one(name)
        try:
            return None if value is None else float(value)
        except ValueError:
            return float("nan")  # shown as the usual message: 'age from' must be a number

    return UrlSettings(
        case=one("case"),
        finding=one("finding"),
        geometry=one("geometry"),
        anchor_set=one("set"),
        text=one("text"),
        views=many("view"),
        sex=one("sex"),
        age_min=age("age_from"),
        age_max=age("age_to"),
        date_from=one("date_from"),
        date_to=one("date_to"),
        label_known=None if one("labelled") is None else one("labelled") in ("1", "true", "yes"),
    )


def with_url(html: str, url: str) -> str:
    """The results' HTML with the address of its search on its root element."""
    marker = "<div class='cx-results'"
    at = html.find(marker)  # a notice (the archive-density line) may come before the results
    if at < 0:
        return html
    quoted = urllib.parse.quote(url, safe="?&=+%:@,;/")
    return html[:at] + f"{marker} data-url='{quoted}'" + html[at + len(marker) :]


#: the age widgets' values when the address leaves the ages open
OPEN_AGES = AGE_ANY

PAGE_JS = r"""
if (!window.cxPageState) {
  window.cxPageState = true;
  // the address of the search on screen (the results' data-url), written after each answer
  let lastUrl = null;
  const syncUrl = () => {
    const root = document.querySelector('#results .cx-results[data-url]');
    if (!root || root.dataset.url === lastUrl) return;
    lastUrl = root.dataset.url;
    history.replaceState(history.state, '', location.pathname + root.dataset.url);
  };
  // Back closes the compare viewer: opening it pushes an entry, closing it pops that entry
  let viewerOpen = false;
  let closingByBack = false;
  const viewerShown = () => {
    const v = document.querySelector('#viewer');
    return !!v && v.getClientRects().length > 0;  // a fixed layer has no offsetParent
  };
  const syncViewer = () => {
    const open = viewerShown();
    if (open && !viewerOpen) {
      history.pushState({cxViewer: true}, '', location.href);
    } else if (!open && viewerOpen && !closingByBack && history.state && history.state.cxViewer) {
      history.back();  // closed by Escape or its button: drop the entry Back would close it with
    }
    if (!open) closingByBack = false;
    viewerOpen = open;
  };
  window.addEventListener('popstate', () => {
    if (viewerShown()) {
      closingByBack = true;
      const close = document.querySelector('#viewer-close');
      if (close) close.click();
    }
  });
  new MutationObserver(() => { syncUrl(); syncViewer(); }).observe(document.body, {
    subtree: true, childList: true, attributes: true,
    attributeFilter: ['class', 'style', 'data-url'],
  });
  // Tab out of a dropdown closes its list (Gradio leaves it open, floating over the page)
  const closeList = (box) => {
    box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}));
    box.dispatchEvent(new FocusEvent('blur'));
  };
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Tab') return;
    const box = event.target;
    if (box && box.matches && box.matches('input[role="combobox"]')) closeList(box);
    setTimeout(() => {
      document.querySelectorAll('input[role="combobox"][aria-expanded="true"]').forEach((b) => {
        if (b !== document.activeElement) closeList(b);
      });
    }, 0);
  }, true);
}
"""


@dataclass(frozen=True)
class Restored:
    """Widget values for a page opened at an address (plain values; None = leave the widget)."""

    finding: str
    anchor_choices: list
    anchor_set: str
    geometry: str | None
    uses_anchors: bool
    wanted: UrlSettings


def restore(lookup, wanted: UrlSettings, current_finding: str | None, default: str) -> Restored:
    """Check the address's finding, geometry and anchor set against this archive (ValueError
    naming a bad one, as typed values are) and give the values to show."""
    from chexretrieve.findings import canonical_finding
    from chexretrieve.geometry import geometry_name

    finding = canonical_finding(wanted.finding or current_finding or default)
    choices, latest = lookup.anchor_set_choices(finding)
    chosen = latest
    if wanted.anchor_set is not None:
        keys = [key for _, key in choices]
        if wanted.anchor_set not in keys:
            raise ValueError(
                f"the link names anchor set {wanted.anchor_set!r}, which {finding} does not have "
                f"here; its latest, {latest}, is used"
            )
        chosen = wanted.anchor_set
    geometry, uses_anchors = None, True
    if wanted.geometry is not None:
        name = geometry_name(wanted.geometry)  # ValueError listing the valid ones
        geometry, uses_anchors = name.name, name.needs_anchors
    return Restored(finding, choices, chosen, geometry, uses_anchors, wanted)
