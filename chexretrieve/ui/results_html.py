"""The results page as escaped HTML (no Gradio): one ranking as thumbnail cards and a table, the
similarity legend, and the query's and a result's labels and report.

Thumbnails travel inside the HTML as ``data:`` PNGs rendered in memory: no file is written or
served for them. Every text from the archive passes :func:`~chexretrieve.ui.render.esc`. Cards and
rows carry ``data-case`` (the image id) for the page script that opens the compare viewer; the
selected case is marked by the server, so a re-ranked page never highlights a stale rank.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from chexretrieve.findings import FINDINGS, NOT_MENTIONED
from chexretrieve.ui.render import (
    esc,
    format_age,
    format_date,
    format_score,
    format_text,
    label_word,
)
from chexretrieve.ui.similarity_figure import chance_legend

#: report text shown in a results-table cell before it is cut (the full text is in the viewer)
REPORT_EXCERPT_CHARS = 160


def png_bytes_uri(png: bytes) -> str:
    """A ``data:image/png;base64,...`` URI of PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def png_data_uri(pixels: np.ndarray, compress_level: int = 1) -> str:
    """A ``data:image/png;base64,...`` URI of 8-bit greyscale pixels."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(
        buffer, format="PNG", compress_level=compress_level
    )
    return png_bytes_uri(buffer.getvalue())


@dataclass(frozen=True)
class ResultRow:
    """One result as the page shows it."""

    # the search hit (rank, image id, raw score, metadata, labels)
    hit: object
    # share of the other candidate cases this one is more similar than, 0..100
    percentile: float
    # data: URI of the thumbnail
    thumbnail_uri: str
    # the report text, when the archive has one
    report: str | None = None
    # rank and percentile of the same case under plain cosine (the optional baseline column)
    baseline_rank: int | None = None
    baseline_percentile: float | None = None


def percentiles(scores: np.ndarray, eligible: np.ndarray, rows: Iterable[int]) -> list[float]:
    """For each gallery row: the percentage of the *other* eligible rows whose score is lower
    (100 = more similar than every other candidate, 0 = less similar than all; 100 for the only
    candidate)."""
    pool = np.asarray(scores)[np.asarray(eligible, dtype=bool)]  # no sort: a few rows asked
    standing = [pool.size - int(np.count_nonzero(pool < scores[row])) for row in rows]
    return standing_percentiles(standing, pool.size)


def standing_percentiles(standing: Iterable[int], candidates: int) -> list[float]:
    """The percentiles of ``percentiles`` from each row's standing (how many candidates score at
    least as high, itself and ties included; SearchResult.standing) among ``candidates`` eligible
    rows: what needs no candidate's score beyond the ranking's own count."""
    if candidates <= 1:
        return [100.0 for _ in standing]
    others = candidates - 1
    return [100.0 * min(candidates - int(n), others) / others for n in standing]


def ranks(scores: np.ndarray, eligible: np.ndarray, rows: Iterable[int]) -> list[int]:
    """For each gallery row: 1 + the number of eligible rows that score higher."""
    pool = np.sort(np.asarray(scores, dtype=np.float64)[np.asarray(eligible, dtype=bool)])
    return [
        1 + int(pool.size - np.searchsorted(pool, float(scores[row]), side="right")) for row in rows
    ]


def _similarity(row: ResultRow, figure) -> tuple[str, str, str]:
    """(text, hover text, extra CSS class) of a result's similarity: the chance of the page's
    figure (chexretrieve.ui.similarity_figure), greyed when withheld, else the percentile."""
    percentile = f"percentile {format_percentile(row.percentile)}"
    if figure is None:
        return format_percentile(row.percentile), percentile, ""
    rank = int(row.hit.rank)
    withheld = " cx-sim-withheld" if figure.withheld else ""
    return figure.cell(rank), f"{figure.title(rank)}; {percentile}", withheld


def format_percentile(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.1f}" if value < 99.95 else "100"


def _chip(word: str) -> str:
    # "not mentioned" -> class cx-not-mentioned (a space made it two classes: no chip drawn)
    return f"<span class='cx-label cx-{word.replace(' ', '-')}'>{word}</span>"


def _mark(image_id: int, relevant: set[int], not_relevant: set[int]) -> str:
    if image_id in relevant:
        return " <span class='cx-mark' title='marked relevant'>✓</span>"
    if image_id in not_relevant:
        return " <span class='cx-mark' title='marked not relevant'>✗</span>"
    return ""


def _viewer_link(url: str | None, image_id: int) -> str:
    if not url:
        return ""
    return (
        f"<a class='cx-ohif' href='{esc(url)}' target='_blank' rel='noopener' "
        f"title='Open the query and case {image_id} side by side in the OHIF viewer'>"
        "Open in viewer</a>"
    )


def results_html(
    rows: list[ResultRow],
    title: str,
    finding: str,
    legend: str,
    selected: int | None = None,
    relevant: Iterable[int] = (),
    not_relevant: Iterable[int] = (),
    baseline: bool = False,
    serial: int = 0,
    viewer_links: Mapping[int, str] | None = None,
    note: str = "",
    figure=None,
) -> str:
    """Cards and table of one ranking (escaped); ``selected`` is highlighted in both. ``serial``
    numbers the answers of one server (``data-serial``: a new answer is told from an identical
    earlier one). ``viewer_links``: image id -> its "Open in viewer" link (OHIF, a new tab).
    ``figure``: the chance beside each result (chexretrieve.ui.similarity_figure.ChanceFigure);
    None shows percentiles."""
    links = dict(viewer_links or {})
    relevant, not_relevant = set(relevant), set(not_relevant)
    root = f"<div class='cx-results' data-serial='{int(serial)}'>"
    if not rows:
        return (
            f"{root}<div class='cx-results-title'>{esc(title)}</div>"
            "<p class='cx-empty'>No case passes the filters: widen them and search again.</p></div>"
        )
    cards, lines = [], []
    for row in rows:
        hit = row.hit
        image_id = int(hit.image_id)
        chosen = image_id == selected
        state = " cx-selected" if chosen else ""
        label = label_word(hit.labels.get(finding))
        mark = _mark(image_id, relevant, not_relevant)
        link = _viewer_link(links.get(image_id), image_id)
        sim, sim_title, sim_class = _similarity(row, figure)
        cards.append(
            f"<div class='cx-card-cell'>"
            f"<button type='button' class='cx-card{state}' data-case='{image_id}' "
            f"aria-pressed='{'true' if chosen else 'false'}' "
            f"title='Compare case {image_id} with the query'>"
            f"<img src='{row.thumbnail_uri}' alt='case {image_id}' draggable='false'>"
            f"<span class='cx-card-text'><b>#{hit.rank}</b> case {image_id}{mark}</span>"
            f"<span class='cx-card-text'><span class='cx-sim{sim_class}' "
            f"title='{esc(sim_title)}'>{esc(sim)}</span> {_chip(label)}</span></button>"
            f"{link}</div>"
        )
        m = hit.metadata
        report = row.report or ""
        excerpt = (
            report
            if len(report) <= REPORT_EXCERPT_CHARS
            else (report[: REPORT_EXCERPT_CHARS - 1].rsplit(" ", 1)[0] + " …")
        )
        baseline_cell = ""
        if baseline:
            baseline_cell = (
                f"<td class='cx-num'>#{row.baseline_rank} · "
                f"{format_percentile(row.baseline_percentile)}</td>"
            )
        lines.append(
            f"<tr class='cx-row{state}' data-case='{image_id}' tabindex='0'>"
            f"<td>{hit.rank}{mark}</td><td>{image_id}</td>"
            f"<td class='cx-num cx-sim{sim_class}' title='{esc(sim_title)}, raw score "
            f"{esc(format_score(hit.score))}'>{esc(sim)}</td>{baseline_cell}"
            f"<td>{esc(format_text(m.get('view_position')))}</td>"
            f"<td>{esc(format_text(m.get('patient_sex')))}</td>"
            f"<td>{esc(format_age(m.get('patient_age_years')))}</td>"
            f"<td>{esc(format_date(m.get('study_date')))}</td>"
            f"<td>{_chip(label)}</td>"
            f"<td class='cx-text cx-report' title='{esc(report)}'>{esc(excerpt) or '—'}</td>"
            f"{f'<td>{link}</td>' if links else ''}</tr>"
        )
    heads = ["#", "case", "similarity" if figure is None else figure.heading]
    heads += ["cosine (baseline)"] if baseline else []
    heads += ["view", "sex", "age", "date", finding, "report"] + (["viewer"] if links else [])
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    return (
        f"{root}<div class='cx-results-title'>{esc(title)}</div>"
        + (f"<p class='cx-note cx-unlike' role='status'>{esc(note)}</p>" if note else "")
        + f"<p class='cx-legend'>{esc(legend)}</p>"
        + f"<div class='cx-cards'>{''.join(cards)}</div>"
        f"<div class='cx-table-wrap'><table class='cx-hits cx-result-table'><thead><tr>{head}"
        f"</tr></thead><tbody>{''.join(lines)}</tbody></table></div></div>"
    )


def similarity_legend(geometry_display: str, candidates: int, baseline: bool, figure=None) -> str:
    """What the similarity numbers mean (plain text): the page's chance figure
    (chexretrieve.ui.similarity_figure), else the percentile."""
    if figure is not None:
        text = chance_legend(figure, geometry_display, candidates)
    else:
        text = (
            f"Similarity: the percentile of a case among the {candidates:,} candidate cases "
            f"under {geometry_display}: 100 = more similar to the query than every other "
            "candidate, 50 = a typical case (hover a number for the raw score, which has no unit)."
        )
    if baseline:
        text += (
            " Cosine (baseline): the rank and percentile the same case has under plain cosine "
            "similarity of the embeddings, which ignores the finding."
        )
    return text


def labels_html(labels: Mapping[str, object] | None, finding: str | None = None) -> str:
    """Every finding's label as chips: the chosen finding first, then positives, uncertain,
    negatives; 'no labels' when the image has none (escaped)."""
    if not labels or all(label_word(labels.get(f)) == NOT_MENTIONED for f in FINDINGS):
        return "<p class='cx-note'>No labels for this image.</p>"
    order = {"positive": 0, "uncertain": 1, "negative": 2, NOT_MENTIONED: 3}
    named = [(f, label_word(labels.get(f))) for f in FINDINGS]
    named.sort(key=lambda item: (item[0] != finding, order[item[1]], item[0]))
    chips = "".join(
        f"<span class='cx-finding'>{esc(f)} {_chip(word)}</span>"
        for f, word in named
        if word != NOT_MENTIONED or f == finding
    )
    return f"<div class='cx-labels'>{chips}</div>"


def report_html(report: str | None) -> str:
    if not report:
        return "<p class='cx-note'>No report text for this image.</p>"
    return f"<p class='cx-report-text'>{esc(report)}</p>"
