"""Every configuration dataclass field is commented in code and documented in the README's table."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import chexretrieve

README = Path(__file__).resolve().parents[1] / "README.md"


def _config_classes() -> list[type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(chexretrieve.__path__, prefix="chexretrieve."):
        if not info.name.endswith(".config"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{obj.__name__}"] = obj
    return list(found.values())


def _settings_table() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Settings\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, "README.md has no '## Settings' section"
    return match.group(1)


def test_config_classes_exist() -> None:
    assert _config_classes(), "no configuration dataclasses found in chexretrieve.*.config modules"


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


def test_every_setting_is_in_the_readme_table() -> None:
    table = _settings_table()
    missing = [
        f"{cls.__name__}.{field.name}"
        for cls in _config_classes()
        for field in dataclasses.fields(cls)
        if f"`{cls.__name__}.{field.name}`" not in table
    ]
    assert not missing, f"settings missing from README.md's Settings table: {missing}"


def _documented_defaults() -> dict[tuple[str, str], str]:
    """(class, field) -> the default column of its README row, without the backticks."""
    rows = {}
    for line in _settings_table().splitlines():
        match = re.match(r"^\| `(\w+)\.(\w+)` \| `([^`]*)` \| ", line)
        if match:
            rows[(match.group(1), match.group(2))] = match.group(3)
    return rows


def _documented_value_matches(text: str, default: object) -> bool:
    """Whether the README's spelling of a default means the code's default.

    The column is a Python literal (``1400``, ``("cosine", "iti")``, ``Path("eval/reports")``), a
    bare string or path (``data/demo``), or ``ClassName()`` for a nested config at its defaults.
    """
    if dataclasses.is_dataclass(default):
        return text == f"{type(default).__name__}()" and default == type(default)()
    try:
        value = eval(text, {"__builtins__": {}, "Path": Path, "inf": float("inf")})  # noqa: S307
    except (NameError, SyntaxError):
        return text == str(default)
    if isinstance(default, tuple) and isinstance(value, list):
        value = tuple(value)
    return value == default


def test_the_readme_table_states_each_default_as_the_code_has_it() -> None:
    """A changed default must change the README too (the table once said 1400 training steps
    after the default had become 2800)."""
    documented = _documented_defaults()
    compared, wrong = 0, []
    for cls in _config_classes():
        for field in dataclasses.fields(cls):
            text = documented.get((cls.__name__, field.name))
            if text is None:
                continue
            if field.default is not dataclasses.MISSING:
                default = field.default
            elif field.default_factory is not dataclasses.MISSING:
                default = field.default_factory()
            else:
                continue
            compared += 1
            if not _documented_value_matches(text, default):
                wrong.append(f"{cls.__name__}.{field.name}: README `{text}`, code {default!r}")
    assert compared > 100, f"only {compared} documented defaults were found in the table"
    assert not wrong, "README Settings defaults differ from the code:\n" + "\n".join(wrong)


def test_the_default_check_notices_a_stale_value() -> None:
    assert _documented_value_matches("2800", 2800)
    assert not _documented_value_matches("1400", 2800)
    assert _documented_value_matches('("cosine", "iti")', ("cosine", "iti"))
    assert not _documented_value_matches('("cosine",)', ("cosine", "iti"))
    assert _documented_value_matches("data/demo", Path("data/demo"))
    assert _documented_value_matches('Path("eval/reports")', Path("eval/reports"))
    assert not _documented_value_matches("data/other", Path("data/demo"))
