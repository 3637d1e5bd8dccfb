"""Which files an ingest run considers."""

from __future__ import annotations

import pytest

from chexretrieve.ingest.config import IngestConfig
from chexretrieve.ingest.discover import discover_files


def test_walk_rules(tmp_path):
    archive = tmp_path / "archive"
    for name in [
        "a/IMG0001.dcm",
        "a/IMG0002.DCM",
        "a/noext",
        "a/1.2.840.113619.2.55.3.1",
        "a/chest.png",
        "a/chest.jpeg",
        "a/notes.txt",
        "a/.hidden.dcm",
        ".cache/b.dcm",
        "b/c/deep.jpg",
    ]:
        path = archive / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    extra = tmp_path / "single.bin"
    extra.write_bytes(b"x")
    found = discover_files([archive, extra, archive / "a" / "IMG0001.dcm"], IngestConfig())
    names = [c.path.relative_to(tmp_path).as_posix() for c in found.candidates]
    assert names == [
        "archive/a/1.2.840.113619.2.55.3.1",
        "archive/a/IMG0001.dcm",
        "archive/a/IMG0002.DCM",
        "archive/a/chest.jpeg",
        "archive/a/chest.png",
        "archive/a/noext",
        "archive/b/c/deep.jpg",
        "single.bin",
    ]
    assert found.skipped == 2  # notes.txt and .hidden.dcm; the hidden folder is not entered
    assert {c.root for c in found.candidates[:-1]} == {archive}
    assert found.candidates[-1].root == tmp_path


def test_missing_path_and_no_paths(tmp_path):
    with pytest.raises(ValueError, match="no such file or folder"):
        discover_files([tmp_path / "nope"], IngestConfig())
    with pytest.raises(ValueError, match="no paths given"):
        discover_files([], IngestConfig())
