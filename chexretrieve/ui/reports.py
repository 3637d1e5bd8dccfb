"""The evaluation tab's data (no Gradio): the newest report folder written by `chexretrieve eval`.

A report folder holds ``report.md`` (tables in Markdown), ``figures/*.png`` and ``manifest.json``
(see ``chexretrieve.evaluation.report``). The Markdown is shown escaped, its figure links removed;
the figures are read here and handed to the browser as pixels (no file is served).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_FIGURE_LINK = re.compile(r"^!\[[^\]]*\]\([^)]*\)\s*$")


@dataclass(frozen=True)
class ReportView:
    # folder name of the report
    name: str
    # escaped Markdown of report.md without figure links
    markdown: str
    # (pixels, caption) of each figure PNG
    figures: list[tuple[np.ndarray, str]]


def report_folders(reports_dir: Path) -> list[Path]:
    """Report folders (those holding report.md) under reports_dir, newest first."""
    root = Path(reports_dir)
    if not root.is_dir():
        return []
    found = [
        p.parent
        for p in root.glob("*/report.md")
        if p.is_file() and not p.is_symlink() and not p.parent.is_symlink()
    ]
    return sorted(found, key=lambda p: ((p / "report.md").stat().st_mtime, p.name), reverse=True)


def report_choices(reports_dir: Path) -> list[str]:
    return [p.name for p in report_folders(reports_dir)]


def load_report(reports_dir: Path, name: str | None = None) -> ReportView | None:
    """The named report folder (default: the newest); None when there is none."""
    folders = report_folders(reports_dir)
    if not folders:
        return None
    chosen = folders[0]
    if name:
        matches = [p for p in folders if p.name == name]
        if not matches:
            raise ValueError(f"no report {name!r} under {reports_dir}")
        chosen = matches[0]
    text = (chosen / "report.md").read_text(encoding="utf-8", errors="replace")
    kept = [line for line in text.splitlines() if not _FIGURE_LINK.match(line.strip())]
    markdown = html.escape("\n".join(kept), quote=False)
    return ReportView(chosen.name, markdown, _figures(chosen / "figures"))


def _figures(folder: Path, limit: int = 12) -> list[tuple[np.ndarray, str]]:
    from PIL import Image

    out: list[tuple[np.ndarray, str]] = []
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.png"))[:limit]:
        if path.is_symlink() or not path.is_file():
            continue
        try:
            with Image.open(path, formats=["PNG"]) as image:
                out.append((np.asarray(image.convert("RGB")), path.stem.replace("_", " ")))
        except (OSError, ValueError):
            continue
    return out


def no_report_markdown(reports_dir: Path) -> str:
    return (
        f"No evaluation report under `{html.escape(str(reports_dir))}` yet. Write one with "
        "`chexretrieve eval retrieval`; the newest "
        "report folder is shown here."
    )
