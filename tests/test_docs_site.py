"""The documentation site builds offline with ``mkdocs build --strict`` (broken links, missing pages
and docstring references fail), holds every setting on its generated page, renders formulas as
MathML and loads nothing from outside the site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chexretrieve.settings_reference import settings

ROOT = Path(__file__).resolve().parents[1]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []  # URLs the browser fetches by itself (scripts, styles, images)
        self.links: list[str] = []  # <a href>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.links.append(values["href"])
        for name in ("src", "srcset"):
            if values.get(name):
                self.loaded.append(values[name])
        if tag == "link" and values.get("href"):
            self.loaded.append(values["href"])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # hang guard; the build takes seconds
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out


def test_the_settings_page_lists_every_setting(site: Path) -> None:
    page = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    missing = [f"{s.owner}.{s.name}" for s in settings() if f"{s.owner}.{s.name}<" not in page]
    assert not missing, f"settings missing from the generated page: {missing}"


def test_formulas_are_mathml_and_docstrings_are_rendered(site: Path) -> None:
    method = (site / "method" / "index.html").read_text(encoding="utf-8")
    assert method.count("<math") >= 10
    assert "$$" not in method
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in (
        "open_search_app",
        "SearchService",
        "fit_geometry",
        "load_encoder",
        "read_radiograph",
    ):
        assert re.search(rf'id="[\w.]*{name}"', api), f"{name} has no rendered entry"


def test_nothing_is_loaded_from_outside_the_site(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 15
    outside = []
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        outside += [
            f"{page.relative_to(site)}: {u[:80]}"
            for u in parser.loaded
            if u.startswith(("http:", "https:", "//"))
        ]
    assert not outside, "\n".join(outside[:20])
    css = "".join(p.read_text(encoding="utf-8") for p in site.rglob("*.css"))
    assert "fonts.googleapis" not in css


def test_the_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """--strict is what catches broken links: a page linking a missing page must fail the build."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](missing.md)\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\n")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
        cwd=tmp_path,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    assert "missing.md" in done.stdout + done.stderr
