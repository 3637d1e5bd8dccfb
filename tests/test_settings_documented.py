"""Every configuration dataclass field is commented in code, and the generated settings reference
(``chexretrieve.settings_reference``: the docs site's Settings page and ``chexretrieve settings``)
lists each one with its default written so that it reads back as the code's default."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import chexretrieve
from chexretrieve.settings_reference import field_comments, settings, settings_markdown


def _config_classes() -> list[type]:
    """Found independently of settings_reference: every dataclass of a chexretrieve.*.config."""
    found: dict[str, type] = {}
    package = Path(chexretrieve.__file__).parent
    for path in package.rglob("*.py"):
        if path.name != "config.py":
            continue
        rel = path.relative_to(package.parent).with_suffix("")
        module = importlib.import_module(".".join(rel.parts))
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{obj.__name__}"] = obj
    return list(found.values())


def _code_default(field: dataclasses.Field) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()  # type: ignore[misc]


def test_config_classes_exist() -> None:
    assert len(_config_classes()) > 20, (
        "configuration dataclasses not found in chexretrieve.*.config"
    )


def test_config_dataclasses_are_frozen_and_commented() -> None:
    for cls in _config_classes():
        assert cls.__dataclass_params__.frozen, f"{cls.__name__} must be a frozen dataclass"
        source = inspect.getsource(cls).splitlines()
        for field in dataclasses.fields(cls):
            pattern = re.compile(rf"^\s+{field.name}\s*:")
            lines = [i for i, line in enumerate(source) if pattern.match(line)]
            assert lines, f"{cls.__name__}.{field.name}: declaration not found"
            i = lines[0]
            commented = "#" in source[i] or source[i - 1].strip().startswith("#")
            assert commented, f"{cls.__name__}.{field.name} needs a comment saying what it is"


def test_the_reference_has_one_row_per_setting_with_its_comment() -> None:
    page = settings_markdown()
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^\| `(\w+\.\w+)` \| `([^`]*)` \| (.*) \|$", page, flags=re.M)
    }
    expected = {f"{c.__name__}.{f.name}" for c in _config_classes() for f in dataclasses.fields(c)}
    assert set(rows) == expected
    for setting in settings():
        assert setting.meaning, f"{setting.owner}.{setting.name} has no comment"
        assert rows[f"{setting.owner}.{setting.name}"][1] == setting.meaning.replace("|", "\\|")


def _reads_back(text: str, default: object) -> bool:
    """Whether the reference's spelling of a default means the code's default."""
    if dataclasses.is_dataclass(default):
        return text == f"{type(default).__name__}()" and default == type(default)()
    value = eval(  # noqa: S307 (our own generated literals)
        text, {"__builtins__": {"frozenset": frozenset}, "Path": Path, "inf": float("inf")}
    )
    return value == default and type(value) is type(default)


def test_every_documented_default_reads_back_as_the_code_default() -> None:
    documented = {(s.owner, s.name): s.default for s in settings()}
    wrong = []
    for cls in _config_classes():
        for field in dataclasses.fields(cls):
            text = documented[(cls.__name__, field.name)]
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                assert text == "required"
                continue
            default = _code_default(field)
            if hasattr(default, "name") and type(default).__module__ != "builtins":
                continue  # enums: shown as Class.MEMBER
            if not _reads_back(text, default):
                wrong.append(f"{cls.__name__}.{field.name}: reference `{text}`, code {default!r}")
    assert not wrong, "\n".join(wrong)


def test_the_read_back_check_notices_a_stale_value() -> None:
    assert _reads_back("2800", 2800)
    assert not _reads_back("1400", 2800)
    assert _reads_back('("cosine", "iti")', ("cosine", "iti"))
    assert not _reads_back('["cosine", "iti"]', ("cosine", "iti"))
    assert _reads_back('Path("data/demo")', Path("data/demo"))
    assert not _reads_back('"data/demo"', Path("data/demo"))


def test_comments_are_read_from_above_and_from_the_end_of_the_line() -> None:
    @dataclasses.dataclass(frozen=True)
    class Example:
        # the first line of a comment
        # and its second line
        a: int = 1
        b: str = "x"  # a trailing comment
        c: float = 0.5

    assert field_comments(Example) == {
        "a": "the first line of a comment and its second line",
        "b": "a trailing comment",
    }
