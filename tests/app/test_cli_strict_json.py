"""Every ``--json`` the command line prints, and the JSON report files it writes, parse with a
strict parser (issue 34, item 13): a missing value is ``null``, never ``NaN`` or ``Infinity``
(which JavaScript's JSON.parse, jq and every strict parser refuse).

The archive is a JPEG one (JPEG files carry no view position, sex or age: pandas' NaN for every
one of them) in two splits with labels, so each command meets missing values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import typer.main
from PIL import Image
from typer.testing import CliRunner

from chexretrieve.cli import app

ENCODER = "stand-in:0:32"
runner = CliRunner()


def _refuse(constant: str):
    raise ValueError(f"not JSON: {constant}")


def strict(text: str):
    """json.loads refusing NaN, Infinity and -Infinity (Python accepts them by default)."""
    return json.loads(text, parse_constant=_refuse)


def _json_commands() -> set[tuple[str, ...]]:
    """Every command of the CLI that has a --json option."""
    found = set()

    def walk(command, path):
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, (*path, name))
            return
        for param in command.params:
            if "--json" in (getattr(param, "opts", None) or ()):
                found.add(path)

    walk(typer.main.get_command(app), ())
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("strict-json")
    saved = dict(os.environ)
    os.environ.update(
        CHEXRETRIEVE_TEST_ENCODERS="1",
        CHEXRETRIEVE_CACHE=str(root / "cache"),
        CHEXRETRIEVE_AUDIT_LOG=str(root / "audit.jsonl"),
        COLUMNS="200",
    )
    os.environ.pop("CHEXRETRIEVE_DB", None)
    rng = np.random.default_rng(0)
    y = np.linspace(0, 1, 64)[:, None] * np.ones((1, 64))
    lines = ["Path,Edema,Pleural Effusion"]
    for split, count in (("train", 24), ("valid", 8)):
        for i in range(count):
            base = y if i % 2 else 1 - y
            pixels = np.clip(base + 0.05 * rng.standard_normal((64, 64)), 0, 1)
            path = root / "archive" / split / f"case{i:02d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((255 * pixels).astype(np.uint8)).save(path, quality=90)
            lines.append(f"{split}/case{i:02d}.jpg,{i % 2},{['1', '0', ''][i % 3]}")
    (root / "labels.csv").write_text("\n".join(lines) + "\n")
    noise = (255 * rng.random((64, 64))).astype(np.uint8)
    Image.fromarray(noise).save(root / "noise.jpg")
    db = f"sqlite:///{root / 'store.sqlite'}"
    done = runner.invoke(app, [
        "ingest", str(root / "archive"), "--db", db, "--encoder", ENCODER, "--workers", "0",
        "--no-progress", "--labels", str(root / "labels.csv"), "--report",
        str(root / "ingest-report.json"),
    ])  # fmt: skip
    assert done.exit_code == 0, done.output
    try:
        yield {"root": root, "db": db}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run(*args: str) -> str:
    done = runner.invoke(app, list(args))
    assert done.exit_code == 0, done.output
    return done.stdout


def _outputs(world) -> dict[tuple[str, ...], list[str]]:
    db = ["--db", world["db"], "--encoder", ENCODER]
    return {
        ("search",): [
            _run("search", "--case", "3", *db, "--finding", "Edema", "--json"),
            _run(
                "search",
                "--image",
                str(world["root"] / "noise.jpg"),
                *db,
                "--finding",
                "Pleural Effusion",
                "--json",
                "--explain",
            ),  # fmt: skip
        ],
        ("density", "fit"): [_run("density", "fit", *db, "--json")],
        ("density", "show"): [_run("density", "show", *db, "--json")],
        ("density", "rare"): [_run("density", "rare", *db, "--json", "--top", "5")],
        ("anchors", "diff"): [_run("anchors", "diff", "edema.a@1", "edema.b@1", "--json")],
        ("anchors", "impact"): [
            _run("anchors", "impact", "edema.a@1", "edema.b@1", *db, "--top-k", "3", "--json")
        ],
    }


def test_every_json_output_of_the_cli_parses_strictly(world):
    outputs = _outputs(world)
    assert set(outputs) == _json_commands()  # a new --json command joins this test
    for command, texts in outputs.items():
        for text in texts:
            assert "NaN" not in text and "Infinity" not in text, command
            strict(text)
    hits = strict(outputs[("search",)][0])["hits"]
    assert hits and all(h["metadata"]["view_position"] is None for h in hits)  # JPEG: unknown
    assert all(h["metadata"]["patient_age_years"] is None for h in hits)


def test_the_ingest_report_file_parses_strictly(world):
    report = strict((world["root"] / "ingest-report.json").read_text(encoding="utf-8"))
    assert report["counts"]["ingested"] == 32


def test_the_strict_writer_turns_every_missing_value_into_null():
    import datetime as dt

    import pandas as pd

    from chexretrieve.strict_json import dumps

    value = {
        "nan": float("nan"), "inf": np.float32("inf"), "nat": pd.NaT, "na": pd.NA,
        "none": None, "when": pd.Timestamp("2024-03-05"), "day": dt.date(2024, 3, 5),
        "array": np.array([1.0, np.nan]), "int": np.int64(7), "path": Path("a/b"),
    }  # fmt: skip
    assert strict(dumps(value)) == {
        "nan": None, "inf": None, "nat": None, "na": None, "none": None,
        "when": "2024-03-05T00:00:00", "day": "2024-03-05", "array": [1.0, None], "int": 7,
        "path": "a/b",
    }  # fmt: skip
