"""The README's three tours run as written, in order, on the phantom world.

Each tour is the fenced ``bash`` block after a ``<!-- tour: NAME -->`` comment. The blocks are run
verbatim by bash (``set -euo pipefail``) in an empty folder that holds a ``.venv/bin/chexretrieve``
shim calling this interpreter's ``python -m chexretrieve``, so the commands a newcomer copies are
the commands tested. What each tour must leave behind is checked against the phantom archive's own
files, not against the commands' output alone.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TOURS = ("radiologist", "curator", "researcher")
_TOUR = re.compile(r"^<!-- tour: (\w+) -->\n```bash\n(.*?)^```$", re.M | re.S)


def readme_tours(text: str | None = None) -> dict[str, str]:
    """Tour name -> its shell block, in README order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return {m.group(1): m.group(2) for m in _TOUR.finditer(text)}


def test_the_readme_has_the_three_tours_and_stays_short() -> None:
    tours = readme_tours()
    assert tuple(tours) == TOURS, f"README tours found: {list(tours)}"
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; reference material belongs in docs/"


def test_the_tour_parser_reads_only_marked_blocks() -> None:
    text = "<!-- tour: a -->\n```bash\necho 1\n```\n\n```bash\necho 2\n```\n"
    assert readme_tours(text) == {"a": "echo 1\n"}


@pytest.fixture(scope="module")
def tour_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("tours")
    shim = work / ".venv" / "bin" / "chexretrieve"
    shim.parent.mkdir(parents=True)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m chexretrieve "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        CHEXRETRIEVE_AUDIT_LOG=str(work / "audit.jsonl"),
        CHEXRETRIEVE_CACHE=str(work / "cache"),
        COLUMNS="200",
    )
    env.pop("CHEXRETRIEVE_DB", None)
    outputs = {}
    for name, block in readme_tours().items():
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,  # a hang guard only: the three tours take a few minutes
        )
        assert done.returncode == 0, (
            f"tour {name!r} failed ({done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        outputs[name] = done.stdout
    return {"work": work, "out": outputs}


@pytest.mark.slow
def test_the_radiologist_tour_ingests_the_archive_and_searches_it(tour_run: dict) -> None:
    work: Path = tour_run["work"]
    with open(work / "tour" / "archive" / "labels.csv", newline="") as handle:
        labelled = list(csv.DictReader(handle))
    db = sqlite3.connect(work / "tour" / "archive.sqlite")
    (images,) = db.execute("select count(*) from images").fetchone()
    assert images == len(labelled) > 0
    report = json.loads((work / "tour" / "ingest.json").read_text())
    assert "ingested" in json.dumps(report)
    out = tour_run["out"]["radiologist"]
    assert "Shared by query and result" in out, out[-2000:]
    records = [json.loads(line) for line in (work / "audit.jsonl").read_text().splitlines()]
    searches = [r for r in records if r.get("action") == "search"]
    assert {s["query"]["geometry"] for s in searches} >= {"softmax", "cosine"}
    assert all(s["query"]["case"] == 2 for s in searches)


@pytest.mark.slow
def test_the_curator_tour_lists_validates_and_measures(tour_run: dict) -> None:
    out = tour_run["out"]["curator"]
    for key in ("pleural_effusion.a@1", "pleural_effusion.b@1"):
        assert key in out
    assert "AUPRC" in out


@pytest.mark.slow
def test_the_researcher_tour_writes_a_report(tour_run: dict) -> None:
    report = tour_run["work"] / "tour" / "report"
    assert (report / "report.html").stat().st_size > 0
    with open(report / "tables" / "auprc.csv", newline="") as handle:
        findings = {row["finding"] for row in csv.DictReader(handle)}
    assert {"Pleural Effusion", "Support Devices"} <= findings
    manifest = json.loads((report / "manifest.json").read_text())
    assert "--db" in json.dumps(manifest)
