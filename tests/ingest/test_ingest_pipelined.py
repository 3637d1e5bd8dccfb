"""The pipelined ingest (decoding workers, working resolution, the encoder on its own thread,
batches in flight) stores exactly what a one-file-at-a-time ingest stores: the same images, pixel
hashes, thumbnails and, in float32, the same embeddings bit for bit.

The one-at-a-time reference decodes each file in the main process, one after the other, and runs
each batch through the encoder and into the store before the next file is read
(``workers=0, overlap_encoder=False``). Both use the same batch size: on the CPU a different
batch size changes the last bits of a float32 embedding (matrix products block differently;
measured up to 2.4e-7), so that comparison holds to a cosine instead.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ingest_fixtures import write_archive

from chexretrieve.dicom import pydicom_test_file, read_radiograph
from chexretrieve.dicom.samples import write_jpeg_file, write_sample
from chexretrieve.dicom.write import derive_uid
from chexretrieve.encoders import EncoderConfig, load_encoder
from chexretrieve.encoders.clip_architecture import ClipModel, ClipSizes
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Small phantom-style DICOMs, RG1 crops large enough to be read at working resolution (in
    four syntaxes and as a JPEG file), and a file that is no radiograph."""
    folder = tmp_path_factory.mktemp("pipelined-archive")
    write_archive(folder / "small", 9, size=48)
    rg1 = read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).pixels
    for i, syntax in enumerate(["native", "rle", "jpeg2000", "jpeg-baseline", "native"]):
        crop = rg1[100 * i : 100 * i + 1100, 50 * i : 50 * i + 1000]
        metadata = {
            "PatientID": f"PIPE{i}",
            "StudyInstanceUID": derive_uid("pipe", "study", i),
            "SeriesInstanceUID": derive_uid("pipe", "series", i),
            "SOPInstanceUID": derive_uid("pipe", "sop", i),
            "Modality": "CR",
        }
        photometric = "MONOCHROME1" if i == 4 else "MONOCHROME2"
        stored = np.round(crop * 32767).astype(np.uint16)
        write_sample(folder / "rg1" / f"{i}.dcm", stored, syntax, metadata, photometric=photometric)
    write_jpeg_file(folder / "rg1" / "crop.jpg", np.rint(rg1[:900, :800] * 255).astype(np.uint8))
    (folder / "small" / "notes.dcm").write_bytes(b"not a radiograph" * 40)
    return folder


@pytest.fixture(scope="module", params=["phantom", "clip-vit"])
def encoder(request, tmp_path_factory):
    if request.param == "phantom":
        return load_encoder("phantom", EncoderConfig(device="cpu"))
    torch.manual_seed(3)  # a small CheXzero-architecture CLIP (ViT), random weights
    sizes = ClipSizes(64, 64, 16, 64, 2, 1, 16, 100, 32, 1, 1)
    path = tmp_path_factory.mktemp("clip") / "small-vit.pt"
    torch.save(ClipModel(sizes).state_dict(), path)
    return load_encoder(f"chexzero:{path}", EncoderConfig(device="cpu"))


def stored_rows(db_path, encoder_id):  # noqa: ANN001, ANN201
    with open_store(f"sqlite:///{db_path}") as store:
        gallery = store.gallery(encoder_id)
        meta = gallery.metadata.reset_index(drop=True)
        order = np.argsort(meta.sop_uid.to_numpy())
        rows = store.execute_readonly_sql(
            "SELECT i.sop_uid, i.pixel_sha256, i.source_path, t.png FROM images i "
            "LEFT JOIN thumbnails t ON t.image_id = i.id ORDER BY i.sop_uid"
        )
        return list(meta.sop_uid.to_numpy()[order]), gallery.vectors[order], rows


def ingest(archive, db_path, encoder, **settings):  # noqa: ANN001, ANN201
    with open_store(f"sqlite:///{db_path}") as store:
        return ingest_paths([archive], store, encoder, IngestConfig(**settings))


def test_pipelined_rows_equal_one_file_at_a_time(archive, encoder, tmp_path):
    sequential = ingest(
        archive, tmp_path / "one.sqlite", encoder, workers=0, batch_size=4, overlap_encoder=False
    )
    pipelined = ingest(
        archive, tmp_path / "pipe.sqlite", encoder, workers=2, batch_size=4, prefetch_batches=2
    )
    for report in (sequential, pipelined):
        assert report.counts["ingested"] == 15 and report.counts["rejected"] == 1
    one = stored_rows(tmp_path / "one.sqlite", encoder.encoder_id)
    pipe = stored_rows(tmp_path / "pipe.sqlite", encoder.encoder_id)
    assert one[0] == pipe[0]  # the same images
    assert one[2] == pipe[2]  # pixel hashes, paths and thumbnails, byte for byte
    assert one[1].dtype == np.float32 and np.array_equal(one[1], pipe[1])  # bit for bit

    # another batch size: the same images, embeddings equal to float32 rounding
    other = ingest(archive, tmp_path / "b1.sqlite", encoder, workers=1, batch_size=1)
    assert other.counts["ingested"] == 15
    single = stored_rows(tmp_path / "b1.sqlite", encoder.encoder_id)
    assert single[0] == one[0] and single[2] == one[2]
    cosines = (single[1] * one[1]).sum(axis=1)
    assert cosines.min() >= 1 - 1e-6


def test_an_encoder_failure_on_its_thread_stops_the_run_with_batches_kept(archive, tmp_path):
    """The encoder thread's error reaches the main thread: the run stops as failed, batches
    written before stay, and a rerun with a working encoder completes the archive."""
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestError

    class Breaking(StandInEncoder):
        calls = 0

        def embed_images(self, images):  # noqa: ANN001, ANN201
            Breaking.calls += 1
            if Breaking.calls > 2:
                raise RuntimeError("device lost")
            return super().embed_images(images)

    broken = Breaking(dim=8)
    config = IngestConfig(workers=1, batch_size=2, max_consecutive_embed_failures=2)
    db = tmp_path / "broken.sqlite"
    with open_store(f"sqlite:///{db}") as store, pytest.raises(IngestError, match="in a row"):
        ingest_paths([archive / "small"], store, broken, config)
    with open_store(f"sqlite:///{db}") as store:
        kept = store.count_images()
        assert 0 < kept < 9
        report = ingest_paths([archive / "small"], store, StandInEncoder(dim=8), config)
        assert report.counts["ingested"] == 9 - kept
        assert store.count_images() == 9 and store.integrity_check() == []
