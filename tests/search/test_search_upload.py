"""Uploaded queries never return their own study or a copy of their own pixels (issue 15, defect 1).

Real files through the real reader, ingest, store and search service: RG1_UNCI and RG1_UNCR
(pydicom-data) are two encodings of one CR study (same StudyInstanceUID, other SOP UIDs).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.dicom import pydicom_test_file, read_radiograph
from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchRequest, SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
from chexretrieve.store import open_store

ENCODER = StandInEncoder(dim=32)


def _others(folder, n=6):
    for index in range(n):
        pixels = np.random.default_rng(index).integers(0, 4096, size=(64, 64), dtype=np.uint16)
        write_radiograph(
            folder / f"other{index}.dcm",
            pixels,
            {
                "StudyInstanceUID": derive_uid("upload-test", index, "study"),
                "SeriesInstanceUID": derive_uid("upload-test", index, "series"),
                "SOPInstanceUID": derive_uid("upload-test", index, "image"),
                "Modality": "CR",
                "PatientID": "UPLOAD-TEST",
            },
        )


@pytest.fixture
def archive(tmp_path):
    folder = tmp_path / "archive"
    folder.mkdir()
    _others(folder)
    try:
        shutil.copy(pydicom_test_file("RG1_UNCI.dcm"), folder / "rg1_unci.dcm")
        upload = pydicom_test_file("RG1_UNCR.dcm")
    except ValueError as exc:
        pytest.fail(f"pydicom-data is a dev dependency: {exc}")
    # the same pixels as other0.dcm under new UIDs (a re-export from another system)
    copy = np.random.default_rng(0).integers(0, 4096, size=(64, 64), dtype=np.uint16)
    reexport = write_radiograph(
        tmp_path / "reexport.dcm",
        copy,
        {
            "StudyInstanceUID": derive_uid("reexport", 0, "study"),
            "SeriesInstanceUID": derive_uid("reexport", 0, "series"),
            "SOPInstanceUID": derive_uid("reexport", 0, "image"),
            "Modality": "CR",
            "PatientID": "UPLOAD-TEST",
        },
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    ingest_paths([folder], store, ENCODER, IngestConfig(workers=0))
    service = SearchService(
        lambda: gallery_from_store(store, ENCODER.encoder_id),
        StoreAnchorProvider(store, ENCODER),
        encoder=ENCODER,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
        thumbnails=store.read_thumbnails,
    )
    yield store, service, upload, reexport
    store.close()


def _upload_request(path, **extra) -> SearchRequest:
    radiograph = read_radiograph(path)
    return SearchRequest(
        finding="Pleural Effusion",
        geometry="cosine",
        image_embedding=ENCODER.embed_images([radiograph.pixels])[0],
        top_k=10,
        **extra,
    ), radiograph


@pytest.mark.parametrize("geometry", ["cosine", "softmax"])
def test_uploading_rg1_uncr_does_not_return_the_archived_rg1_unci(archive, geometry):
    store, service, upload, _ = archive
    request, radiograph = _upload_request(upload)
    request = SearchRequest(**{**request.__dict__, "geometry": geometry})
    archived = store.image_by_sop_uid(
        read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).metadata.sop_uid
    )
    assert archived is not None and archived.study_uid == radiograph.metadata.study_uid
    unaware = service.search(request)
    assert unaware.hits[0].image_id == archived.image_id  # what the defect looked like
    fixed = service.search(
        SearchRequest(
            **{
                **request.__dict__,
                "query_study_uid": radiograph.metadata.study_uid,
                "query_pixel_sha256": radiograph.pixel_sha256,
            }
        )
    )
    assert archived.image_id not in [h.image_id for h in fixed.hits]
    assert fixed.candidates == unaware.candidates - 1 == store.count_images() - 1


def test_an_upload_with_the_pixels_of_an_archived_image_does_not_return_it(archive):
    store, service, _, reexport = archive
    request, radiograph = _upload_request(reexport)
    same_pixels = [
        int(i)
        for i, sha in service.gallery.metadata["pixel_sha256"].items()
        if sha == radiograph.pixel_sha256
    ]
    assert len(same_pixels) == 1  # other0.dcm, in another study
    assert same_pixels[0] in [h.image_id for h in service.search(request).hits]
    fixed = service.search(
        SearchRequest(
            **{
                **request.__dict__,
                "query_study_uid": radiograph.metadata.study_uid,  # matches nothing archived
                "query_pixel_sha256": radiograph.pixel_sha256,
            }
        )
    )
    assert same_pixels[0] not in [h.image_id for h in fixed.hits]
    assert fixed.candidates == store.count_images() - 1


def test_cli_search_by_an_uploaded_file_excludes_its_archived_study(archive, tmp_path, monkeypatch):
    store, _, upload, _ = archive
    archived = store.image_by_sop_uid(
        read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).metadata.sop_uid
    )
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    result = CliRunner().invoke(
        app,
        ["search", "--db", store.config.url, "--encoder", "stand-in:0:32", "--image",
         str(upload), "--finding", "Pleural Effusion", "--geometry", "cosine", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    shown = [hit["case"] for hit in json.loads(result.stdout)["hits"]]
    assert shown and archived.image_id not in shown
    assert len(shown) == store.count_images() - 1


def _copies_of_rg1(folder):
    """rg1.png, rg1.jpg (quality 75) and a 512-px PNG of the archived RG1_UNCI, as uploads."""
    from PIL import Image

    from chexretrieve.dicom import render_for_display

    full = Image.fromarray(render_for_display(read_radiograph(pydicom_test_file("RG1_UNCI.dcm"))))
    small = full.copy()
    small.thumbnail((512, 512), Image.Resampling.LANCZOS)
    paths = []
    for name, image, options in (
        ("rg1.png", full, {}),
        ("rg1.jpg", full, {"quality": 75}),
        ("rg1-512.png", small, {}),
    ):
        image.save(folder / name, **options)
        paths.append(folder / name)
    return paths


def test_png_jpeg_and_resized_copies_of_an_archived_image_are_not_results(archive, tmp_path):
    """Issue 24, defect 2: no UID and new pixels, so only the content tells the copy."""
    from chexretrieve.search.duplicates import content_signature

    store, service, _, _ = archive
    archived = store.image_by_sop_uid(
        read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).metadata.sop_uid
    )
    for path in _copies_of_rg1(tmp_path):
        request, radiograph = _upload_request(path, query_pixel_sha256=None)
        request = SearchRequest(
            **{**request.__dict__, "query_pixel_sha256": radiograph.pixel_sha256}
        )
        assert radiograph.metadata.source_format != "dicom"
        unaware = service.search(request)
        assert unaware.hits[0].image_id == archived.image_id, path.name  # the defect
        fixed = service.search(
            SearchRequest(
                **{**request.__dict__, "query_signature": content_signature(radiograph.pixels)}
            )
        )
        assert archived.image_id not in [h.image_id for h in fixed.hits], path.name
        assert fixed.candidates == unaware.candidates - 1  # only the copy left out
        signed = SearchRequest(
            **{**request.__dict__, "query_signature": content_signature(radiograph.pixels)}
        )
        assert service.copies_of(signed) == (archived.image_id,)


def test_a_distinct_image_close_in_embedding_is_not_called_a_copy(archive, tmp_path):
    """The content test, not the embedding's cosine, decides: with the cosine prefilter open to
    every archived image, only RG1 is a copy of rg1.png."""
    import dataclasses

    from chexretrieve.search.duplicates import content_signature

    store, service, _, _ = archive
    service.config = dataclasses.replace(service.config, duplicate_cosine=-1.0)
    path = _copies_of_rg1(tmp_path)[0]
    request, radiograph = _upload_request(path)
    request = SearchRequest(
        **{**request.__dict__, "query_signature": content_signature(radiograph.pixels)}
    )
    copies = service.copies_of(request)
    archived = store.image_by_sop_uid(
        read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).metadata.sop_uid
    )
    assert copies == (archived.image_id,)


def test_cli_search_by_a_png_copy_excludes_the_archived_original(archive, tmp_path, monkeypatch):
    store, _, _, _ = archive
    archived = store.image_by_sop_uid(
        read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).metadata.sop_uid
    )
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    for path in _copies_of_rg1(tmp_path):
        result = CliRunner().invoke(
            app,
            ["search", "--db", store.config.url, "--encoder", "stand-in:0:32", "--image",
             str(path), "--finding", "Pleural Effusion", "--geometry", "cosine", "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        shown = [hit["case"] for hit in json.loads(result.stdout)["hits"]]
        assert shown and archived.image_id not in shown, path.name
