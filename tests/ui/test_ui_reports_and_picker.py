"""Report text from the archive's CSVs, and the case picker over a real store (accession numbers,
label status, paging past the first page)."""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.ingest.labels import read_label_csv
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.service import SearchService
from chexretrieve.search.sources import StoreAnchorProvider, gallery_from_store
from chexretrieve.store import open_store
from chexretrieve.ui.handlers import CaseLookup
from chexretrieve.ui.radiology_reports import ReportTexts, read_reports_csv

N = 7


@pytest.fixture
def archive(tmp_path):
    """N small DICOM files in a phantom-like layout with labels.csv and reports.csv beside."""
    root = tmp_path / "archive"
    rows, reports = ["Path,Pleural Effusion,Edema"], ["Path,Report"]
    for index in range(N):
        relative = f"train/patient{index:03d}/study1/view1_frontal.dcm"
        pixels = np.full((40, 30), 100 * index, dtype=np.uint16)
        write_radiograph(
            root / relative,
            pixels,
            {
                "PatientID": f"PICK-{index}",
                "AccessionNumber": f"ACC{index:04d}" if index != 6 else "ACC0005",  # 5, 6 share
                "StudyInstanceUID": derive_uid("pick", index, "study"),
                "SeriesInstanceUID": derive_uid("pick", index, "series"),
                "SOPInstanceUID": derive_uid("pick", index, "image"),
                "Modality": "DX",
            },
        )
        effusion = ("1.0", "0.0", "-1.0", "")[index % 4]
        rows.append(f"{relative},{effusion},")
        reports.append(
            f'{relative},"Report {index}: {"moderate effusion" if effusion == "1.0" else "clear"}."'
        )
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    (root / "reports.csv").write_text("\n".join(reports) + "\n")
    return root


@pytest.fixture
def lookup(archive, tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    encoder = StandInEncoder(dim=16)
    ingest_paths([archive], store, encoder, IngestConfig(workers=0),
                 labels=read_label_csv(archive / "labels.csv"))  # fmt: skip
    service = SearchService(
        lambda: gallery_from_store(store, encoder.encoder_id),
        StoreAnchorProvider(store, encoder),
        encoder=encoder,
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
    )
    yield CaseLookup(service, store, thumbnail_px=32, case_page_size=3)
    store.close()


def _id_of(lookup, index: int) -> int:
    meta = lookup.gallery.metadata
    return int(meta.index[meta["source_path"].str.contains(f"patient{index:03d}/")][0])


def test_reports_are_found_beside_the_archive_and_matched_by_path(lookup):
    query = lookup.load_case(_id_of(lookup, 0))
    assert query.report == "Report 0: moderate effusion."
    assert lookup.report_of(_id_of(lookup, 1)) == "Report 1: clear."
    html = lookup.query_details(query, "Pleural Effusion")
    assert "Report 0: moderate effusion." in html
    assert "Pleural Effusion <span class='cx-label cx-positive'>positive" in html


def test_a_report_stored_for_the_study_wins_over_the_csv(lookup):
    image_id = _id_of(lookup, 1)
    study_uid = lookup.store.image_by_id(image_id).study_uid
    lookup.store.put_reports({study_uid: ("Stored:  right\n  effusion.", "test")})
    assert lookup.report_of(image_id) == "Stored: right effusion."
    assert lookup.report_of(_id_of(lookup, 0)) == "Report 0: moderate effusion."  # none stored


def test_a_report_stored_while_the_server_runs_is_shown_at_the_next_look(lookup):
    """The server keeps the stored reports it read; storing a report moves the archive's
    revision, and the kept ones are read again: the detail panel and the results page show the
    new report without a restart (they showed the CSV's text before)."""
    from chexretrieve.ui.handlers import SearchSettings

    image_id = _id_of(lookup, 1)
    query = lookup.load_case(_id_of(lookup, 0))
    settings = SearchSettings("Pleural Effusion", "cosine", top_k=N - 1)

    def shown_on_the_results_page() -> str | None:
        page = lookup.search(query, settings)
        return next(row.report for row in page.rows if row.hit.image_id == image_id)

    assert lookup.report_of(image_id) == "Report 1: clear."  # none stored: the CSV's
    assert shown_on_the_results_page() == "Report 1: clear."
    study_uid = lookup.store.image_by_id(image_id).study_uid
    lookup.store.put_reports({study_uid: ("Stored later: small effusion.", "test")})
    assert lookup.report_of(image_id) == "Stored later: small effusion."
    lookup.store.put_reports({study_uid: ("Stored again: no effusion.", "test")})
    assert shown_on_the_results_page() == "Stored again: no effusion."


def test_kept_stored_reports_are_read_again_only_when_the_revision_moves():
    revision = [1]
    reads: list[list[int]] = []
    stored_text: dict[int, str | None] = {1: None, 2: "Two."}

    def stored_many(image_ids):
        reads.append(list(image_ids))
        return {i: stored_text[i] for i in image_ids}

    texts = ReportTexts(
        stored=lambda i: stored_many([i])[i], stored_many=stored_many, revision=lambda: revision[0]
    )
    texts.prefetch([1, 2])
    assert texts.report_for(None, 1, prefetched=True) is None
    assert texts.report_for(None, 2) == "Two." and reads == [[1, 2]]  # kept: no new read
    stored_text[1] = "One."
    assert texts.report_for(None, 1) is None and reads == [[1, 2]]  # same revision: kept
    revision[0] = 2
    assert texts.report_for(None, 1) == "One." and reads == [[1, 2], [1]]
    texts.prefetch([1, 2])
    assert reads == [[1, 2], [1], [2]]  # 1 was read at this revision; 2 was forgotten


def test_a_report_read_while_the_revision_moves_is_not_kept():
    """Another request sees the revision move while this one reads: what this one read may be
    older than the store's, so it is not kept, and the next look reads the store again."""
    revision = [1]

    def stored_many(image_ids):
        revision[0] = 2  # a report is stored meanwhile ...
        texts._forget_if_moved()  # ... and another request has seen it
        return {i: "Read before the change." for i in image_ids}

    texts = ReportTexts(stored=lambda i: "Stored meanwhile.", stored_many=stored_many,
                        revision=lambda: revision[0])  # fmt: skip
    texts.prefetch([1])
    assert 1 not in texts._by_image
    assert texts.report_for(None, 1) == "Stored meanwhile."
    assert texts._by_image[1] == "Stored meanwhile."


def test_a_configured_reports_csv_wins_and_an_unrelated_path_has_no_report(archive, tmp_path):
    other = tmp_path / "reports-extra.csv"
    other.write_text(
        "Path,Report Text\narchive/train/patient002/study1/view1_frontal.dcm,From the extra file.\n"
    )
    texts = ReportTexts([other])
    assert texts.report_for(str(archive / "train/patient002/study1/view1_frontal.dcm")) == (
        "From the extra file."
    )
    assert texts.report_for(str(archive / "train/patient003/study1/view1_frontal.dcm")) is None
    assert ReportTexts().report_for(str(tmp_path / "elsewhere" / "x.dcm")) is None
    bad = tmp_path / "bad.csv"
    bad.write_text("File,Text\na,b\n")
    with pytest.raises(ValueError, match="needs a 'Path' column and a report column"):
        read_reports_csv(bad)


def test_the_picker_pages_filters_and_finds_accession_numbers(lookup):
    first = lookup.case_page(finding="Pleural Effusion")
    assert first.total == N and first.pages == 3 and len(first.choices) == 3
    assert first.summary == f"cases 1–3 of {N} (page 1 of 3)"
    last = lookup.case_page(finding="Pleural Effusion", page=2)
    assert len(last.choices) == N - 6  # the page after the first two
    assert "Pleural Effusion: positive" in first.choices[0][0]
    positive = lookup.case_page(finding="Pleural Effusion", status="positive")
    assert sorted(i for _, i in positive.choices) == sorted(_id_of(lookup, k) for k in (0, 4))
    assert not any("ACC" in label for label, _ in first.choices)  # identifiers are never shown
    assert lookup.case_page("acc000").total == 0  # a prefix finds nothing (no oracle)
    by_accession = lookup.case_page("acc0003")  # the whole number, any case
    assert [i for _, i in by_accession.choices] == [_id_of(lookup, 3)]
    assert lookup.resolve_case("ACC0003") == _id_of(lookup, 3)
    with pytest.raises(ValueError, match="that accession number holds 2 images"):
        lookup.resolve_case("ACC0005")
    with pytest.raises(ValueError, match="no case with id or accession number 'ACC9'"):
        lookup.resolve_case("ACC9")
    assert lookup.load_case("acc0002").case_id == _id_of(lookup, 2)


def test_stored_reports_kept_in_memory_are_the_most_recent_few(monkeypatch):
    """A server over a large archive keeps at most KEPT_REPORTS stored reports, the most
    recently asked for; a forgotten one is read from the store again, and is the same text."""
    from chexretrieve.ui import radiology_reports

    monkeypatch.setattr(radiology_reports, "KEPT_REPORTS", 5)
    reads: list[int] = []

    def text(image_id):  # odd ids have a stored report
        return f"Report of {image_id}." if image_id % 2 else None

    def stored(image_id):
        reads.append(image_id)
        return text(image_id)

    def stored_many(image_ids):
        reads.extend(image_ids)
        return {i: text(i) for i in image_ids}

    texts = ReportTexts(stored=stored, stored_many=stored_many)
    texts.prefetch(range(1, 21))  # 20 images: only the last 5 are kept
    assert list(texts._by_image) == [16, 17, 18, 19, 20]
    reads.clear()
    assert texts.report_for(None, 19) == "Report of 19." and reads == []  # from memory
    assert texts.report_for(None, 18) is None and reads == []  # "none" is remembered too
    assert texts.report_for(None, 3) == "Report of 3." and reads == [3]  # forgotten: read again
    assert len(texts._by_image) == 5 and 3 in texts._by_image
    assert 16 not in texts._by_image  # the least recently asked for went
    assert 19 in texts._by_image  # asked for a moment ago: kept
