"""Every CHEXRETRIEVE_* environment variable the package reads is in the README's Settings."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bCHEXRETRIEVE_[A-Z0-9_]*[A-Z0-9]\b")


def _variables_in(folder: Path) -> dict[str, str]:
    """Variable -> the first file naming it."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def _documented() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Settings\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, "README.md has no '## Settings' section"
    rows = [line for line in match.group(1).splitlines() if line.startswith("| `CHEXRETRIEVE_")]
    return {line.split("`")[1] for line in rows}


def test_the_package_reads_environment_variables():
    found = _variables_in(ROOT / "chexretrieve")
    assert {"CHEXRETRIEVE_DB", "CHEXRETRIEVE_CACHE", "CHEXRETRIEVE_AUDIT_LOG"} <= set(found)


def test_every_environment_variable_is_in_the_readme_table():
    documented = _documented()
    missing = {n: f for n, f in _variables_in(ROOT / "chexretrieve").items() if n not in documented}
    assert not missing, f"CHEXRETRIEVE_* variables missing from README's Settings: {missing}"


def test_the_table_names_no_variable_nobody_reads():
    used = set(_variables_in(ROOT / "chexretrieve")) | set(_variables_in(ROOT / "tests"))
    stale = _documented() - used
    assert not stale, f"README documents variables nothing reads: {sorted(stale)}"
