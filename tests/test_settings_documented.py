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
