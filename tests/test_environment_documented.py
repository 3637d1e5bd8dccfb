"""Every CHEXRETRIEVE_* variable the package reads is in docs/reference/environment.md."""

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
    text = (ROOT / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `CHEXRETRIEVE_")]
    return {line.split("`")[1] for line in rows}


def test_the_package_reads_environment_variables():
    found = _variables_in(ROOT / "chexretrieve")
    assert {"CHEXRETRIEVE_DB", "CHEXRETRIEVE_CACHE", "CHEXRETRIEVE_AUDIT_LOG"} <= set(found)


def test_every_environment_variable_is_documented():
    documented = _documented()
    missing = {n: f for n, f in _variables_in(ROOT / "chexretrieve").items() if n not in documented}
    assert not missing, (
        f"CHEXRETRIEVE_* variables missing from docs/reference/environment.md: {missing}"
    )


def test_the_table_names_no_variable_nobody_reads():
    used = set(_variables_in(ROOT / "chexretrieve")) | set(_variables_in(ROOT / "tests"))
    stale = _documented() - used
    assert not stale, (
        f"docs/reference/environment.md documents variables nothing reads: {sorted(stale)}"
    )
