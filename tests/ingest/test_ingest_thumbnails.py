"""Thumbnails written at ingest (in workers, also with preprocessing split off), the backfill of an
older store, and the viewer's stored fields (Window Center/Width, accession number)."""

from __future__ import annotations

import shutil

import numpy as np
import pydicom
import pytest
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.dicom import pydicom_test_file, thumbnail_pixels
from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.ingest.thumbnails import backfill_thumbnails
from chexretrieve.store import open_store


def halves(folder, index: int, rows: int = 300, columns: int = 200):
    """A radiograph whose left half is black and right half white (12-bit, no window)."""
    pixels = np.zeros((rows, columns), dtype=np.uint16)
    pixels[:, columns // 2 :] = 4095
    pixels[0, 0] = 1  # not a constant half: the pixel hash differs per index below
    pixels[1, 0] = index
    return write_radiograph(
        folder / f"halves{index}.dcm",
        pixels,
        {
            "PatientID": "THUMB-TEST",
            "AccessionNumber": f"ACC{index:04d}",
            "StudyInstanceUID": derive_uid("thumbs", index, "study"),
            "SeriesInstanceUID": derive_uid("thumbs", index, "series"),
            "SOPInstanceUID": derive_uid("thumbs", index, "image"),
            "Modality": "DX",
        },
    )


def first(header, keyword: str) -> float:
    value = header[keyword].value
    return float(value[0] if isinstance(value, pydicom.multival.MultiValue) else value)


def check_halves(png: bytes, max_side: int = 64) -> None:
    image = thumbnail_pixels(png)
    assert image.dtype == np.uint8 and image.shape == (max_side, round(max_side * 200 / 300))
    middle = image.shape[1] // 2  # the edge may blur over a few thumbnail pixels
    left, right = image[:, : middle - 4], image[:, middle + 4 :]
    assert left.max() <= 5 and right.min() >= 250  # dark left, bright right, as in the file


@pytest.mark.parametrize("workers", [0, 1])
def test_ingest_stores_a_thumbnail_per_image(tmp_path, workers):
    archive = tmp_path / "archive"
    archive.mkdir()
    paths = [halves(archive, i) for i in range(3)]
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    config = IngestConfig(workers=workers, thumbnail_px=64, start_method="spawn")
    report = ingest_paths([archive], store, StandInEncoder(dim=16), config)
    ids = [o.image_id for o in report.outcomes]
    assert len(ids) == len(paths) and report.counts["ingested"] == 3
    stored = store.read_thumbnails(ids)
    assert sorted(stored) == sorted(ids)
    for png in stored.values():
        check_halves(png)
    assert store.read_thumbnail(ids[0]) == stored[ids[0]]
    assert store.read_thumbnail(10_000) is None
    assert store.table_counts()["thumbnails"] == 3
    store.close()


def test_no_thumbnails_when_switched_off(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    halves(archive, 0)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    ingest_paths([archive], store, StandInEncoder(dim=16), IngestConfig(workers=0, thumbnail_px=0))
    assert store.table_counts()["thumbnails"] == 0
    assert [i for i, _ in store.images_needing_thumbnail()] == [1]
    store.close()


def test_backfill_and_cli_fill_what_is_missing_and_skip_lost_files(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    paths = [halves(archive, i) for i in range(4)]
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    ingest_paths([archive], store, StandInEncoder(dim=16), IngestConfig(workers=0, thumbnail_px=0))
    paths[3].unlink()
    report = backfill_thumbnails(store, max_side=64, batch_size=2)
    assert report.to_dict() == {"images": 4, "written": 3, "missing_files": 1, "unreadable": 0}
    for png in store.read_thumbnails([1, 2, 3]).values():
        check_halves(png)
    again = backfill_thumbnails(store, max_side=64)
    assert again.images == 1 and again.written == 0  # only the lost file is still missing
    store.close()
    # the command line redoes thumbnails of another size
    result = CliRunner().invoke(
        app, ["ingest", "--thumbnails-only", "--db", url, "--thumbnail-px", "32", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "3 written for 4 images" in result.output
    with open_store(url) as store:
        assert max(thumbnail_pixels(store.read_thumbnail(1)).shape) == 32
    absent = tmp_path / "absent.sqlite"
    result = CliRunner().invoke(app, ["ingest", "--thumbnails-only", "--db", f"sqlite:///{absent}"])
    assert result.exit_code == 2 and "no chexretrieve store" in result.output
    assert not absent.exists()


def test_viewer_fields_are_stored_from_the_header(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    source = pydicom_test_file("RG1_UNCI.dcm")
    shutil.copy(source, archive / "rg1.dcm")
    made_path = halves(archive, 7)
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    ingest_paths([archive], store, StandInEncoder(dim=16), IngestConfig(workers=0))
    for path in (source, made_path):
        header = pydicom.dcmread(path, stop_before_pixels=True)
        stored = store.image_by_sop_uid(header.SOPInstanceUID)
        window = (first(header, "WindowCenter"), first(header, "WindowWidth"))
        assert (stored.window_center, stored.window_width) == window
        assert stored.accession_number == str(header.AccessionNumber)
    assert store.image_by_sop_uid(derive_uid("thumbs", 7, "image")).accession_number == "ACC0007"
    rg1 = store.image_by_sop_uid(pydicom.dcmread(source, stop_before_pixels=True).SOPInstanceUID)
    assert rg1.source_path == str((archive / "rg1.dcm").absolute())
    thumb = thumbnail_pixels(store.read_thumbnail(rg1.image_id))
    assert max(thumb.shape) == 256 and abs(thumb.shape[1] - 256 * 1841 / 1955) <= 1
    assert "accession_number" not in store.images_frame().columns  # never in gallery metadata
    store.close()
