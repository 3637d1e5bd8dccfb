"""`chexretrieve ingest --fit-density`, `density fit|show|rare` and `search --json --explain` as a
user runs them (subprocesses over a real SQLite store, stand-in encoder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
ENCODER = "stand-in:0:32"


def _cli(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "CHEXRETRIEVE_TEST_ENCODERS": "1",
        "COLUMNS": "200",
        "PYTHONPATH": str(REPO),
        **env,
    }
    environment.pop("CHEXRETRIEVE_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "chexretrieve", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
    )


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """30 smooth 'films' of two kinds (bright top / bright bottom) plus one noise image."""
    root = tmp_path_factory.mktemp("density-cli")
    images = root / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    y = np.linspace(0, 1, 64)[:, None] * np.ones((1, 64))
    for i in range(30):
        base = y if i % 2 else 1 - y
        pixels = np.clip(base + 0.05 * rng.standard_normal((64, 64)), 0, 1)
        Image.fromarray((255 * pixels).astype(np.uint8)).save(images / f"case{i:02d}.png")
    noise = (255 * rng.random((64, 64))).astype(np.uint8)
    Image.fromarray(noise).save(root / "noise.png")
    env = {
        "CHEXRETRIEVE_CACHE": str(root / "cache"),
        "CHEXRETRIEVE_AUDIT_LOG": str(root / "audit.jsonl"),
    }
    db = f"sqlite:///{root / 'store.sqlite'}"
    done = _cli(
        "ingest", str(images), "--db", db, "--encoder", ENCODER, "--workers", "0",
        "--no-progress", "--fit-density", cwd=root, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "density:" in done.stdout + done.stderr
    return {"root": root, "db": db, "env": env}


def test_ingest_fits_and_show_reports_a_current_fit(archive):
    done = _cli("density", "show", "--db", archive["db"], "--encoder", ENCODER, "--json",
                cwd=archive["root"], env=archive["env"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["n_images"] == 30 and shown["stale"] is False and shown["n_components"] >= 1
    assert list((archive["root"] / "cache" / "density").rglob("revision-*.npz"))


def test_search_json_carries_density_and_explain_carries_concepts(archive):
    common = ["--db", archive["db"], "--encoder", ENCODER, "--finding", "Edema", "--json"]
    done = _cli("search", "--image", str(archive["root"] / "noise.png"), *common,
                cwd=archive["root"], env=archive["env"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    density = json.loads(done.stdout)["density"]
    assert density["ood"] is True and "unlike the archive" in density["message"]
    assert density["percentile"] == 0.0 and density["log_density"] < density["threshold"]
    done = _cli("search", "--case", "2", "--explain", *common, cwd=archive["root"],
                env=archive["env"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["density"]["ood"] is False and payload["density"]["concepts"]
    assert all(hit["concepts"] for hit in payload["hits"])
    text = _cli("search", "--case", "2", "--explain", *common[:-1], cwd=archive["root"],
                env=archive["env"])  # fmt: skip
    assert "in distribution" in text.stdout and "archive cluster:" in text.stdout
    audit = [
        json.loads(line) for line in (archive["root"] / "audit.jsonl").read_text().splitlines()
    ]
    assert [r["density"]["ood"] for r in audit] == [True, False, False]


def test_rare_lists_the_lowest_density_images_first(archive):
    done = _cli("density", "rare", "--db", archive["db"], "--encoder", ENCODER, "--top", "5",
                "--json", cwd=archive["root"], env=archive["env"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    cases = json.loads(done.stdout)["cases"]
    assert [c["rank"] for c in cases] == [1, 2, 3, 4, 5]
    values = [c["log_density"] for c in cases]
    assert values == sorted(values)
    bad = _cli("density", "rare", "--db", archive["db"], "--encoder", ENCODER, "--top", "0",
               cwd=archive["root"], env=archive["env"])  # fmt: skip
    assert bad.returncode == 2 and "--top must be at least 1" in bad.stderr
