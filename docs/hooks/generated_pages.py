"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``).

* ``reference/settings.md`` is generated from the configuration dataclasses and their field
  comments (``chexretrieve.settings_reference``), so the settings reference has one source;
* the screenshots under ``ui/`` and the published reports under ``eval/reports/`` join the site from
  where they live in the repository, so pages link them without copies in ``docs/``;
* TeX between ``$$ … $$`` (display) or ``$ … $`` (inline) is turned into MathML when the site is
  built (latex2mathml), so formulas render offline with no MathJax or CDN script.
"""

from __future__ import annotations

import re
from pathlib import Path

from latex2mathml.converter import convert as tex_to_mathml
from mkdocs.structure.files import File, Files

from chexretrieve.settings_reference import settings_markdown

ROOT = Path(__file__).resolve().parents[2]
#: repository files published with the site: (folder relative to the root, file endings)
PUBLISHED = (("ui", (".png",)), ("eval/reports", (".png", ".md", ".html", ".csv", ".json")))

_DISPLAY = re.compile(r"^\$\$\n(.*?)\n\$\$$", re.S | re.M)
_INLINE = re.compile(r"(?<![\\$`])\$(?!\s)([^$\n`]+?)(?<!\s)\$(?!\d)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]+`")


def on_files(files: Files, config) -> Files:  # noqa: ANN001 (MkDocs' hook signature)
    files.append(
        File.generated(config, "reference/settings.md", content=settings_markdown() + "\n")
    )
    for folder, endings in PUBLISHED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in endings:
                rel = path.relative_to(ROOT).as_posix()
                files.append(
                    File(
                        rel,
                        src_dir=str(ROOT),
                        dest_dir=config["site_dir"],
                        use_directory_urls=config["use_directory_urls"],
                    )
                )
    return files


def _math(markdown: str) -> str:
    """TeX to MathML outside code: display blocks first, then inline spans."""
    kept: list[str] = []

    def keep(match: re.Match) -> str:
        kept.append(match.group(0))
        return f"\x00{len(kept) - 1}\x00"

    text = _FENCE.sub(keep, markdown)
    text = _DISPLAY.sub(lambda m: tex_to_mathml(m.group(1), display="block"), text)
    text = _CODE.sub(keep, text)
    text = _INLINE.sub(lambda m: tex_to_mathml(m.group(1)), text)
    return re.sub("\x00(\\d+)\x00", lambda m: kept[int(m.group(1))], text)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001
    if page.file.src_uri.startswith("eval/"):
        return markdown
    return _math(markdown)
