"""benchmarks/gpu_check.sh's CPU dry run: the script a GPU session runs in one device call works
end to end here (data, ViT-B/32 encoder, ingest, agreement with the CPU reference, JPEG decode
rates), so it is ready whenever a session is lent a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_dry_run_on_the_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable,
           "PHANTOM": "12", "RG1": "2", "REFERENCE": "8"}  # fmt: skip
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "dry-run"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((tmp_path / "gpu_check.json").read_text())
    assert figures["dry_run"] and set(figures["ingest"]) == {"float32"}
    run = figures["ingest"]["float32"]
    assert run["counts"]["ingested"] == 12 + 2 + 2 and run["counts"]["rejected"] == 0
    agreement = run["cosine_to_cpu_float32"]
    assert agreement["images"] == 8 and agreement["min"] >= 0.9999
    assert figures["encoder_only_images_per_s"]["float32"] > 0
    decode = figures["jpeg_decode_per_worker"]
    assert decode["cpu-full"]["images_per_s"] > 0 and decode["cpu-reduced"]["images_per_s"] > 0
    assert decode["gpu-nvjpeg"] == "skipped in the dry run"
