"""Parsing of the evaluation commands' comma-separated options (shared by ``eval retrieval``,
``eval runtime`` and ``eval natural``); typer's BadParameter names the option and the bad value."""

from __future__ import annotations

import shlex
import sys

import typer


def csv_items(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    return () if items in ((), ("none",)) else items


def int_items(value: str | None, option: str) -> tuple[int, ...] | None:
    items = csv_items(value)
    if items is None:
        return None
    try:
        return tuple(int(v) for v in items)
    except ValueError:
        raise typer.BadParameter(
            f"{option} takes comma-separated integers, not {value!r}"
        ) from None


def float_items(value: str | None, option: str) -> tuple[float, ...] | None:
    items = csv_items(value)
    if items is None:
        return None
    try:
        return tuple(float(v) for v in items)
    except ValueError:
        raise typer.BadParameter(f"{option} takes comma-separated numbers, not {value!r}") from None


def command_line() -> str:
    return "chexretrieve " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def finding_items(value: str | None) -> tuple[str, ...] | None:
    from chexretrieve.findings import canonical_finding

    items = csv_items(value)
    if items is None:
        return None
    try:
        return tuple(canonical_finding(f) for f in items)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
