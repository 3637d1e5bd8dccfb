"""The settings reference, generated from the configuration dataclasses and their field comments.

Every ``chexretrieve/**/config.py`` module holds frozen dataclasses whose fields each carry a
comment (on the line above, or at the end of the declaration's line). Those comments are the one
source of truth: the documentation site's settings page and ``chexretrieve settings`` are both
built here, so a changed default or comment changes the reference with it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import io
import tokenize
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePath

import chexretrieve


@dataclass(frozen=True)
class Setting:
    """One field of one configuration dataclass, as the reference shows it."""

    owner: str  # the dataclass's name, e.g. "StoreConfig"
    module: str  # the module defining it, e.g. "chexretrieve.store.config"
    name: str  # the field's name
    default: str  # the default as a Python literal ("required" when there is none)
    meaning: str  # the field's comment, joined into one line


def config_classes() -> list[type]:
    """Every dataclass defined in a ``chexretrieve.*.config`` module, by module, in source order."""
    found: list[type] = []
    package = Path(chexretrieve.__file__).resolve().parent
    # files, not pkgutil: a folder without __init__.py (a namespace package) is walked too
    names = sorted(
        ".".join(("chexretrieve", *path.relative_to(package).with_suffix("").parts))
        for path in package.rglob("config.py")
    )
    for name in names:
        module = importlib.import_module(name)
        classes = [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
        ]
        found.extend(sorted(classes, key=lambda c: inspect.getsourcelines(c)[1]))
    return found


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment: the comment lines right above the declaration, else the comment
    at the end of the declaration's line. Fields without a comment are absent."""
    source = inspect.getsource(cls)
    names = {field.name for field in dataclasses.fields(cls)}
    comments_by_line: dict[int, str] = {}
    first_name_on_line: dict[int, tuple[str, int]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        row, col = token.start
        if token.type == tokenize.COMMENT:
            comments_by_line[row] = token.string.lstrip("#").strip()
        elif token.type == tokenize.NAME and row not in first_name_on_line:
            first_name_on_line[row] = (token.string, col)
    lines = source.splitlines()
    out: dict[str, str] = {}
    for row, (name, col) in first_name_on_line.items():
        if name not in names or name in out:
            continue
        rest = lines[row - 1][col + len(name) :].lstrip()
        if not rest.startswith(":"):
            continue
        above: list[str] = []
        r = row - 1
        while r in comments_by_line and lines[r - 1].lstrip().startswith("#"):
            above.insert(0, comments_by_line[r])
            r -= 1
        text = " ".join(above) if above else comments_by_line.get(row, "")
        if text:
            out[name] = text
    return out


def default_literal(field: dataclasses.Field) -> str:
    """The field's default written as Python would (``Path("x")``, ``("a", "b")``, ``Class()``)."""
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    return _literal(value)


def _literal(value: object) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if value == type(value)():
            return f"{type(value).__name__}()"
        return repr(value)
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, PurePath):
        return f'Path("{value.as_posix()}")'
    if isinstance(value, str):
        return f'"{value}"' if '"' not in value else repr(value)
    if isinstance(value, float) and value == float("inf"):
        return "inf"
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, frozenset):
        return "frozenset({" + ", ".join(sorted(_literal(v) for v in value)) + "})"
    return repr(value)


def settings() -> list[Setting]:
    """Every setting of every configuration dataclass, in the reference's order."""
    out: list[Setting] = []
    for cls in config_classes():
        comments = field_comments(cls)
        for field in dataclasses.fields(cls):
            out.append(
                Setting(
                    owner=cls.__name__,
                    module=cls.__module__,
                    name=field.name,
                    default=default_literal(field),
                    meaning=comments.get(field.name, ""),
                )
            )
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_markdown() -> str:
    """The settings page: one section per configuration dataclass, one table row per field."""
    parts = [
        "# Settings reference",
        "",
        "Every field of every configuration dataclass (`chexretrieve/**/config.py`) with its",
        "default and the comment beside it in the code. This page is generated when the site is",
        "built (`chexretrieve settings` prints the same table), so it cannot drift from the code.",
        "The command line builds these dataclasses from its options; library callers pass them.",
        "",
    ]
    by_owner: dict[tuple[str, str], list[Setting]] = {}
    for setting in settings():
        by_owner.setdefault((setting.module, setting.owner), []).append(setting)
    for (module, owner), rows in by_owner.items():
        parts += [f"## `{owner}`", "", f"Defined in `{module}`.", ""]
        parts += ["| setting | default | meaning |", "|---|---|---|"]
        for s in rows:
            parts.append(f"| `{s.owner}.{s.name}` | `{_cell(s.default)}` | {_cell(s.meaning)} |")
        parts.append("")
    return "\n".join(parts)


def settings_text(width: int = 100, only: list[Setting] | None = None) -> str:
    """The same reference as plain text for a terminal: ``Owner.field = default`` then meaning."""
    import textwrap

    lines: list[str] = []
    for s in settings() if only is None else only:
        lines.append(f"{s.owner}.{s.name} = {s.default}")
        for chunk in textwrap.wrap(s.meaning, width=max(width - 4, 20)) or ["(no comment)"]:
            lines.append(f"    {chunk}")
    return "\n".join(lines)


def repository_root() -> Path:
    """The checkout holding this package (where docs/ and mkdocs.yml live)."""
    return Path(chexretrieve.__file__).resolve().parents[1]
