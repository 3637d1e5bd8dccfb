"""Ingest end to end in-process: outcomes, bad input, idempotence, conflicts, encoders, faults."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ingest_fixtures import (
    PickyEncoder,
    misbehaving_reader,
    write_archive,
    write_bad_files,
    write_dx,
)

from chexretrieve.dicom import ReadConfig, read_radiograph
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, IngestError, ingest_paths
from chexretrieve.ingest.report import write_report

EXPECTED_REASONS = {
    "garbage.dcm": "not-dicom",
    "notes.dcm": "not-dicom",
    "empty.dcm": "empty-file",
    "truncated.dcm": "truncated",
    "multiframe.dcm": "multi-frame",
}


def by_name(report):
    return {o.path.rsplit("/", 1)[-1]: o for o in report.outcomes}


def test_good_and_bad_files_with_worker_processes(tmp_path, store):
    good = write_archive(tmp_path / "archive", 10)
    write_bad_files(tmp_path / "archive" / "bad")
    (tmp_path / "archive" / ".hidden.dcm").write_bytes(b"ignored")
    (tmp_path / "archive" / "readme.txt").write_text("ignored")
    encoder = StandInEncoder(dim=16)
    config = IngestConfig(workers=1, batch_size=4)
    report = ingest_paths([tmp_path / "archive"], store, encoder, config)

    assert report.status == "completed" and report.skipped_files == 2
    assert report.counts == {
        "ingested": 10,
        "embedded": 0,
        "already-present": 0,
        "rejected": 5,
        "conflict": 0,
    }
    outcomes = by_name(report)
    for name, reason in EXPECTED_REASONS.items():
        assert outcomes[name].outcome == "rejected" and outcomes[name].reason == reason
        assert name in outcomes[name].detail  # the message names the file
        assert outcomes[name].image_id is None
    assert store.count_images() == 10 and store.count_embeddings(encoder.encoder_id) == 10
    gallery = store.gallery(encoder.encoder_id)
    assert set(gallery.metadata.source_path) == {str(p) for p in good}
    # the stored embedding is the encoder's embedding of the decoded pixels
    first = store.image_by_sop_uid(gallery.metadata.sop_uid.iloc[0])
    pixels = read_radiograph(first.source_path, ReadConfig()).pixels
    np.testing.assert_allclose(gallery.vectors[0], encoder.embed_images([pixels])[0], atol=1e-6)
    assert first.view_position in ("PA", "AP") and first.patient_age_years is not None
    assert first.pixel_spacing_row_mm == pytest.approx(0.2) and first.modality == "DX"
    assert store.integrity_check() == []

    path = write_report(report, tmp_path / "out" / "report.json")
    payload = json.loads(path.read_text())
    assert len(payload["files"]) == 15 and payload["counts"]["rejected"] == 5
    assert payload["reasons"] == {"empty-file": 1, "multi-frame": 1, "not-dicom": 2, "truncated": 1}
    runs = store.outcomes_frame(report.run_id)
    assert sorted(runs.outcome.value_counts().items()) == [("ingested", 10), ("rejected", 5)]


def test_second_run_adds_nothing_and_skips_decoding(tmp_path, store):
    write_archive(tmp_path / "archive", 6)
    encoder = StandInEncoder(dim=16)
    ingest_paths([tmp_path / "archive"], store, encoder, IngestConfig(workers=0, batch_size=4))
    before = store.table_counts()
    revision = store.archive_revision()
    calls = []

    def counting_reader(path, config):
        calls.append(path)
        return read_radiograph(path, config)

    again = ingest_paths(
        [tmp_path / "archive"],
        store,
        encoder,
        IngestConfig(workers=0),
        reader=counting_reader,
    )
    assert again.counts["already-present"] == 6 and again.counts["ingested"] == 0
    assert calls == []  # unchanged files are not decoded again
    after = store.table_counts()
    for table in ("studies", "images", "embeddings", "labels", "source_files"):
        assert after[table] == before[table]
    assert store.archive_revision() == revision


def test_touched_file_is_decoded_again_and_found_present(tmp_path, store):
    paths = write_archive(tmp_path / "archive", 3)
    encoder = StandInEncoder(dim=16)
    ingest_paths([tmp_path / "archive"], store, encoder, IngestConfig(workers=0))
    paths[0].touch()
    write_dx(tmp_path / "archive" / "copy-of-1.dcm", 1)  # same UID, same pixels, new path
    report = ingest_paths([tmp_path / "archive"], store, encoder, IngestConfig(workers=0))
    outcomes = by_name(report)
    assert outcomes["copy-of-1.dcm"].outcome == "already-present"
    assert outcomes[paths[0].name].outcome == "already-present"
    assert outcomes[paths[0].name].detail is None  # decoded and compared, not the stamp shortcut
    assert store.count_images() == 3


def test_same_uid_with_other_pixels_is_a_conflict_and_not_overwritten(tmp_path, store):
    write_archive(tmp_path / "archive", 4)
    encoder = StandInEncoder(dim=16)
    ingest_paths([tmp_path / "archive"], store, encoder, IngestConfig(workers=0))
    stored = store.image_by_sop_uid(store.gallery(encoder.encoder_id).metadata.sop_uid.iloc[2])
    vector = store.embeddings_for(encoder.encoder_id, [stored.image_id])
    edited = write_dx(tmp_path / "edited" / "edited.dcm", 999, sop_index=2, seed=12345)
    report = ingest_paths([edited], store, encoder, IngestConfig(workers=0))
    (outcome,) = report.outcomes
    assert outcome.outcome == "conflict" and outcome.reason == "same-uid-different-pixels"
    assert outcome.image_id == stored.image_id
    assert store.image_by_id(stored.image_id) == stored
    np.testing.assert_array_equal(
        store.embeddings_for(encoder.encoder_id, [stored.image_id]), vector
    )
    assert store.count_images() == 4


def test_a_second_encoder_adds_its_embeddings_to_the_same_images(tmp_path, store):
    write_archive(tmp_path / "archive", 5)
    first, second = StandInEncoder(dim=16), StandInEncoder(dim=24)
    ingest_paths([tmp_path / "archive"], store, first, IngestConfig(workers=0))
    report = ingest_paths([tmp_path / "archive"], store, second, IngestConfig(workers=0))
    assert report.counts["embedded"] == 5 and store.count_images() == 5
    assert store.gallery(first.encoder_id).vectors.shape == (5, 16)
    assert store.gallery(second.encoder_id).vectors.shape == (5, 24)
    again = ingest_paths([tmp_path / "archive"], store, second, IngestConfig(workers=0))
    assert again.counts["already-present"] == 5


def test_hanging_and_crashing_decodes_are_rejected_and_the_run_goes_on(tmp_path, store):
    write_archive(tmp_path / "archive", 6)
    write_dx(tmp_path / "archive" / "hang.dcm", 500)
    write_dx(tmp_path / "archive" / "crash.dcm", 501)
    # the hanging file costs the whole timeout; a good file takes milliseconds, its first decode in
    # a worker (imports included) well under a second even on a busy machine
    config = IngestConfig(workers=1, batch_size=2, file_timeout_s=5.0)
    report = ingest_paths(
        [tmp_path / "archive"], store, StandInEncoder(dim=16), config, reader=misbehaving_reader
    )
    outcomes = by_name(report)
    assert (
        outcomes["hang.dcm"].reason == "timeout"
        and "longer than 5 s" in outcomes["hang.dcm"].detail
    )
    assert outcomes["crash.dcm"].reason == "worker-crash"
    assert "exit code 3" in outcomes["crash.dcm"].detail
    assert report.counts["ingested"] == 6 and report.worker_restarts == 2
    assert store.count_images() == 6 and store.integrity_check() == []


def test_an_image_the_encoder_fails_on_is_rejected_alone(tmp_path, store):
    write_archive(tmp_path / "archive", 5, size=48)
    write_dx(tmp_path / "archive" / "odd.dcm", 77, size=40)
    encoder = PickyEncoder(StandInEncoder(dim=16), refused_rows=40)
    report = ingest_paths([tmp_path / "archive"], store, encoder, IngestConfig(workers=0))
    assert report.counts["ingested"] == 5 and report.counts["rejected"] == 1
    odd = by_name(report)["odd.dcm"]
    assert odd.reason == "embed-error" and "refuses images with 40 rows" in odd.detail
    assert store.count_images() == 5
    broken = PickyEncoder(StandInEncoder(dim=8), refused_rows=48)  # fails on every image
    with pytest.raises(IngestError, match="failed on 3 images in a row") as caught:
        ingest_paths(
            [tmp_path / "archive"],
            store,
            broken,
            IngestConfig(workers=0, batch_size=2, max_consecutive_embed_failures=3),
        )
    assert caught.value.report.status == "failed"
    assert store.runs_frame().status.tolist()[-1] == "failed"
    # odd.dcm (first in walk order, 40 rows, refused by the first encoder) is new and embeddable
    # now; then three failures in a row stopped the run
    assert store.count_embeddings(broken.encoder_id) == 1 and store.count_images() == 6


def test_missing_path_is_refused_before_anything_is_written(tmp_path, store):
    with pytest.raises(ValueError, match="no such file or folder"):
        ingest_paths([tmp_path / "absent"], store, StandInEncoder(dim=16), IngestConfig(workers=0))
    assert store.table_counts()["ingest_runs"] == 0


def test_random_byte_corruptions_never_stop_the_run(tmp_path, store):
    original = write_dx(tmp_path / "original.dcm", 3, size=40).read_bytes()
    rng = np.random.default_rng(2026)
    folder = tmp_path / "corrupted"
    folder.mkdir()
    for i in range(60):
        data = bytearray(original)
        for position in rng.integers(0, len(data), size=int(rng.integers(1, 9))):
            data[position] = int(rng.integers(0, 256))
        (folder / f"corrupt{i:03d}.dcm").write_bytes(bytes(data))
    config = IngestConfig(workers=1, batch_size=8, file_timeout_s=10.0)
    report = ingest_paths([folder], store, StandInEncoder(dim=16), config)
    assert report.status == "completed" and len(report.outcomes) == 60
    assert {o.outcome for o in report.outcomes} <= {
        "ingested",
        "already-present",
        "rejected",
        "conflict",
    }
    assert all(o.reason for o in report.outcomes if o.outcome in ("rejected", "conflict"))
    # flipped pixel bytes keep the UID: a conflict with the first stored copy, never an overwrite
    assert report.counts["conflict"] > 0 and report.counts["rejected"] > 0
    assert store.count_images() == report.counts["ingested"]
    assert store.integrity_check() == []


def test_workers_run_the_encoders_preprocessing_with_the_same_embeddings(tmp_path):
    """With workers, the encoder's own preprocessing runs in them and the main process only runs
    the model; the stored embeddings equal those of decoding and preprocessing inline. An
    image the preprocessing refuses is rejected as 'embed-error' and the run goes on."""
    from ingest_fixtures import SplitEncoder

    from chexretrieve.store import open_store

    paths = write_archive(tmp_path / "archive", 6, size=48)
    write_dx(tmp_path / "archive" / "tall.dcm", 99, size=40)
    stored = {}
    for workers in (0, 1):
        encoder = SplitEncoder(refused_rows=40)
        with open_store(f"sqlite:///{tmp_path / f'w{workers}.sqlite'}") as db:
            report = ingest_paths(
                [tmp_path / "archive"], db, encoder, IngestConfig(workers=workers)
            )
            gallery = db.gallery(encoder.encoder_id)
            stored[workers] = (list(gallery.metadata.sop_uid), gallery.vectors)
        outcomes = by_name(report)
        assert outcomes["tall.dcm"].outcome == "rejected"
        assert outcomes["tall.dcm"].reason == "embed-error"
        assert "40-row images are not accepted" in outcomes["tall.dcm"].detail
        assert report.counts["ingested"] == len(paths)
        # the reader preprocesses (in the worker, or inline with workers=0); the encoder object
        # in this process only runs the model
        assert encoder.preprocessed_here == 0 and encoder.model_calls >= 1
    assert stored[0][0] == stored[1][0]
    np.testing.assert_allclose(stored[0][1], stored[1][1], atol=1e-6)
    with pytest.raises(AssertionError):  # the comparison can fail: the images differ
        np.testing.assert_allclose(stored[0][1][0], stored[0][1][1], atol=1e-6)
