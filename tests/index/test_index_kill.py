"""kill -9 during `index build`, then resume: nothing served half-built, nothing redone, and the
resumed index holds exactly the bytes of an index built without interruption (issue 31)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from index_fixtures import make_store

from chexretrieve.index import read_manifest
from chexretrieve.index.manifest import read_journal
from chexretrieve.index.rowfile import RowFileRecord

CHILD = Path(__file__).with_name("build_child.py")
N = 6000


def run_child(url: str, folder: Path, stop: str | None = None) -> list[str]:
    """The child's progress lines; with ``stop``, it is killed (SIGKILL) where it stops."""
    env = {**os.environ, "PYTHONPATH": str(CHILD.parent)}
    command = [sys.executable, str(CHILD), url, str(folder)] + ([stop] if stop else [])
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)  # fmt: skip
    lines = []
    try:
        for line in child.stdout:
            lines.append(line.strip())
            if line.startswith("stopped"):
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=600)  # a hang guard only
    finally:
        if child.poll() is None:
            child.kill()
    if stop is None:
        assert child.returncode == 0, child.stderr.read()[-3000:]
        assert lines[-1].startswith("done"), lines[-5:]
    else:
        assert child.returncode == -signal.SIGKILL, lines[-5:]
    return lines


def digests(folder: Path) -> dict:
    """What an index holds, by logical name (file names may differ between builds)."""
    manifest = read_manifest(folder)
    content = manifest.content
    out = {name: RowFileRecord.from_dict(r).digest() for name, r in content["files"].items()}
    for entry in content["entries"].values():
        key = (entry["finding"], entry["geometry"], entry["anchor_key"])
        out[key] = RowFileRecord.from_dict(entry["file"]).digest()
        out[(*key, "calibrations")] = entry["calibrations"]
    out["serving"] = content["serving"]
    out["rows"] = content["rows"]
    out["density_rows"] = content["density"]["scored_rows"]
    return out


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("kill") / "archive.sqlite"
    make_store(path, N).close()
    return f"sqlite:///{path}"


def test_a_killed_build_resumes_from_its_checkpoints_and_equals_an_uninterrupted_one(
    url: str, tmp_path: Path
) -> None:
    reference = tmp_path / "reference"
    run_child(url, reference)
    folder = tmp_path / "killed"

    # 1. killed while reading the archive, after 3 of 6 chunks: nothing is served yet
    run_child(url, folder, stop="archive_rows:3000")
    assert read_manifest(folder) is None
    journal = read_journal(folder)
    assert journal["phase"] == "archive" and journal["content"]["rows"] == 3000
    # rows past the checkpoint may be on disk; the resumed build cuts them off

    # 2. resumed, then killed inside the features of the second finding, past a checkpoint
    lines = run_child(url, folder, stop="features_Edema_·_softmax:3000")
    first = next(line for line in lines if line.startswith("progress archive_rows"))
    assert first.split()[2] == "3000"  # the archive was not read again from the start
    served = read_manifest(folder)  # the generation committed before the kill serves
    assert served.rows == N and list(served.serving) == ["Pleural Effusion"]
    assert read_journal(folder)["phase"] == "entry"

    # 3. resumed to the end
    lines = run_child(url, folder)
    edema = [int(line.split()[2]) for line in lines if "features_Edema" in line]
    assert edema[0] > 2000  # continued after the checkpoint at 2,000 rows
    assert not any("features_Pleural_Effusion" in line for line in lines)  # not redone
    assert read_journal(folder) is None
    assert digests(folder) == digests(reference)


def test_a_killed_build_resumes_after_the_archive_grew(url: str, tmp_path: Path) -> None:
    """Killed inside a feature entry, then images arrive: the resumed build appends them and
    restarts that entry (its checkpoint was of a smaller archive); nothing it needs is lost."""
    import shutil

    from index_fixtures import add_images

    from chexretrieve.store import open_store

    path = Path(url.removeprefix("sqlite:///"))
    copy = tmp_path / "growing.sqlite"
    shutil.copy(path, copy)
    grown = f"sqlite:///{copy}"
    folder = tmp_path / "index"
    run_child(grown, folder, stop="features_Edema_·_softmax:3000")
    with open_store(grown) as store:
        add_images(store, N, 500)
    run_child(grown, folder)
    manifest = read_manifest(folder)
    assert manifest.rows == N + 500
    assert all(e["file"]["rows"] == N + 500 for e in manifest.entries.values())
    assert read_journal(folder) is None
