"""`chexretrieve ingest` updates the archive index at its end, while a server reads it: the
server's next search sees the new cases (issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chexretrieve.index import IndexConfig, index_folder, read_manifest
from chexretrieve.store import open_store

ENCODER = "stand-in:0:32"


def write_radiographs(folder: Path, start: int, count: int) -> None:
    from chexretrieve.dicom.write import derive_uid, write_radiograph

    folder.mkdir(parents=True, exist_ok=True)
    for index in range(start, start + count):
        rng = np.random.default_rng(index)
        pixels = rng.integers(0, 4096, size=(64, 64), dtype=np.uint16)
        meta = {
            "PatientID": f"IDX{index % 7:03d}",
            "StudyInstanceUID": derive_uid("index-test", index, "study"),
            "SeriesInstanceUID": derive_uid("index-test", index, "series"),
            "SOPInstanceUID": derive_uid("index-test", index, "image"),
            "Modality": "CR",
            "PatientSex": "MF"[index % 2],
            "ViewPosition": ("PA", "AP")[index % 2],
        }
        write_radiograph(folder / f"img{index:05d}.dcm", pixels, meta)


def ingest(folder: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1"}
    command = [sys.executable, "-m", "chexretrieve", "ingest", str(folder), "--db", url,
               "--encoder", ENCODER, "--workers", "0", "--no-progress", "--thumbnail-px", "0",
               *extra]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_an_ingest_while_serving_appends_and_the_next_search_sees_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ui.app import open_case_lookup
    from chexretrieve.ui.config import UIConfig
    from chexretrieve.ui.handlers import SearchSettings

    url = f"sqlite:///{tmp_path / 'archive.sqlite'}"
    write_radiographs(tmp_path / "first", 0, 60)
    first = ingest(tmp_path / "first", url)
    assert "archive index: 60 images" in first.stderr + first.stdout
    store = open_store(url)
    folder = index_folder(store, StandInEncoder(dim=32).encoder_id, IndexConfig())
    before = read_manifest(folder)
    assert before.rows == 60 and len(before.entries) == 13  # built in full at the first ingest

    config = UIConfig(db_url=url, encoder=ENCODER, feature_cache_dir=tmp_path / "features")
    lookup, _ = open_case_lookup(config, store=store, encoder=StandInEncoder(dim=32))
    assert type(lookup.gallery).__name__ == "IndexGallery"
    query = lookup.load_case(3)
    lookup.search(query, SearchSettings("Pleural Effusion", "softmax", top_k=5))

    write_radiographs(tmp_path / "second", 60, 25)
    second = ingest(tmp_path / "second", url)  # another process, while the server runs
    assert "archive index: 85 images" in second.stderr + second.stdout
    after = read_manifest(folder)
    assert after.rows == 85 and after.file("embeddings").file == before.file("embeddings").file
    new_case = max(int(i) for i in store.archive_chunk(StandInEncoder(dim=32).encoder_id, 0,
                                                       1000).image_ids)  # fmt: skip
    page = lookup.search(lookup.load_case(new_case),
                         SearchSettings("Pleural Effusion", "softmax", top_k=84))  # fmt: skip
    assert len(lookup.gallery) == 85
    assert page.result.candidates == 84  # every other case, the 25 new ones among them
    assert len({r.hit.image_id for r in page.rows} & set(range(61, 86))) >= 24
    store.close()
