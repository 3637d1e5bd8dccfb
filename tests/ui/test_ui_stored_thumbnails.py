"""The results page shows the thumbnails written at ingest, without reading the archived files."""

from __future__ import annotations

import numpy as np

from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
from chexretrieve.store import open_store
from chexretrieve.ui.handlers import CaseLookup, SearchSettings


def _decode(uri: str) -> np.ndarray:
    import base64
    import io

    from PIL import Image

    head, _, data = uri.partition(",")
    assert head == "data:image/png;base64"
    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        return np.asarray(image)


def test_result_thumbnails_come_from_the_store_when_the_files_are_gone(tmp_path):
    archive = tmp_path / "archive"
    for index in range(5):
        pixels = np.zeros((120, 80), dtype=np.uint16)
        pixels[:, 40:] = 4095  # dark left half, bright right half
        pixels[0, 0] = index + 1
        write_radiograph(
            archive / f"case{index}.dcm",
            pixels,
            {
                "PatientID": "UI-THUMBS",
                "StudyInstanceUID": derive_uid("ui-thumbs", index, "study"),
                "SeriesInstanceUID": derive_uid("ui-thumbs", index, "series"),
                "SOPInstanceUID": derive_uid("ui-thumbs", index, "image"),
                "Modality": "DX",
            },
        )
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    encoder = StandInEncoder(dim=16)
    ingest_paths([archive], store, encoder, IngestConfig(workers=0, thumbnail_px=48))
    for path in archive.iterdir():
        path.unlink()  # only the store is left: a placeholder would show without thumbnails
    service = SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        StoreAnchorProvider(store, encoder),
        encoder=encoder,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )
    lookup = CaseLookup(service, store, thumbnail_px=32)
    query = lookup.load_case(int(service.gallery.image_ids[0]))
    ranking = lookup.search(query, SearchSettings(finding="Edema", top_k=4))
    assert len(ranking.rows) == 4
    for row in ranking.rows:
        image = _decode(row.thumbnail_uri)  # what the page shows, inside the HTML
        assert image.shape == (32, round(32 * 80 / 120))  # stored 48 px, shrunk to the UI's 32
        assert image[:, :8].max() <= 5 and image[:, -8:].min() >= 250
        assert row.thumbnail_uri in ranking.html
    store.close()


class _NoThumbnailsStore:
    """A store with no thumbnail for any image (an older store); counts its reads."""

    def __init__(self):
        self.asked: list[list[int]] = []

    def read_thumbnails(self, image_ids):
        self.asked.append(sorted(int(i) for i in image_ids))
        return {}


def test_images_without_a_stored_thumbnail_are_asked_for_once_per_page(tmp_path):
    """A page of results asks the store once for all its thumbnails; the images it has none of
    are rendered from their files (here: missing, so the placeholder) without asking again."""
    from chexretrieve.ui.thumbnails import ArchiveThumbnails

    class Thumbnails(ArchiveThumbnails):
        def _metadata(self, image_id):
            return {"source_path": str(tmp_path / f"gone-{image_id}.dcm")}

    for threads in (1, 3):
        thumbs = Thumbnails(thumbnail_px=32, read_threads=threads)
        thumbs.store = _NoThumbnailsStore()
        thumbs.prefetch_thumbnails([4, 9, 2, 7])
        assert thumbs.store.asked == [[2, 4, 7, 9]]  # one read for the page, none per image
        for image_id in (4, 9, 2, 7):
            assert np.array_equal(thumbs.case_thumbnail(image_id), thumbs._placeholder)
        assert thumbs.store.asked == [[2, 4, 7, 9]]  # then from memory
