"""Checks of the case picker and stored thumbnails, run on SQLite and on PostgreSQL."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image
from store_fixtures import image_record, unit_vector

from chexretrieve.findings import FINDINGS
from chexretrieve.store import BatchItem, Thumbnail

N = 1203  # more than two pages of 500


def png(value: int, rows: int = 6, columns: int = 4) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((rows, columns), value, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def label_of(i: int) -> float | None:
    """Edema label of case i: positive, negative, uncertain, blank; every 5th is unlabelled."""
    return (1.0, 0.0, -1.0, None)[i % 4]


def fill(store) -> dict[int, int]:  # noqa: ANN001
    """N images with accession numbers, labels and a thumbnail on every other one; i -> image id."""
    store.register_encoder("fake:a", 8, 20.0)
    items = []
    for i in range(N):
        labels = None if i % 5 == 4 else {"Edema": label_of(i), "Pneumonia": 1.0}
        record = image_record(i, accession_number=f"Acc{i:05d}" if i % 10 else None)
        thumb = Thumbnail(png(i % 256), max_side=8) if i % 2 == 0 else None
        items.append(BatchItem(f"/a/{i}.dcm", record, unit_vector(i, 8), labels, thumbnail=thumb))
    ids = {}
    for start in range(0, N, 400):
        outcomes = store.write_batch("fake:a", items[start : start + 400])
        ids.update({start + k: o.image_id for k, o in enumerate(outcomes)})
    return ids


def check_case_picker(store) -> None:  # noqa: ANN001, PLR0915
    ids = fill(store)
    case_of = {image_id: i for i, image_id in ids.items()}

    # paging: every case once, beyond 500, with the total
    seen, offset = [], 0
    while True:
        page = store.find_cases(offset=offset, limit=500)
        assert page.total == N
        seen += [c.image_id for c in page.cases]
        if len(page.cases) < 500:
            break
        offset += 500
    assert seen == sorted(ids.values())

    # label status of one finding, counted independently from the labels written
    expected = {
        "positive": {i for i in range(N) if i % 5 != 4 and label_of(i) == 1.0},
        "negative": {i for i in range(N) if i % 5 != 4 and label_of(i) == 0.0},
        "uncertain": {i for i in range(N) if i % 5 != 4 and label_of(i) == -1.0},
        "blank": {i for i in range(N) if i % 5 != 4 and label_of(i) is None},
        "unlabelled": {i for i in range(N) if i % 5 == 4},
    }
    for status, wanted in expected.items():
        page = store.find_cases(finding="edema", status=status, limit=1000)
        assert page.total == len(wanted), status
        assert {case_of[c.image_id] for c in page.cases} == set(sorted(wanted)[:1000]), status
    # Pneumonia is positive on every labelled case; blank means "labelled, this finding not"
    assert store.find_cases(finding="Pneumonia", status="blank").total == 0

    # each row: labels over every finding, PHI-minimal metadata, accession, thumbnail flag
    row = store.find_cases(text=str(ids[6]), limit=1000).cases[0]
    assert row.image_id == ids[6] and row.accession_number == "Acc00006"
    assert set(row.labels) == set(FINDINGS)
    assert row.labels["Edema"] == -1.0 and row.labels["Pneumonia"] == 1.0
    assert row.labels["Cardiomegaly"] is None and row.has_thumbnail is True
    assert row.view_position == "AP" and row.patient_sex == "M" and row.patient_age_years == 26
    assert store.find_cases(text=str(ids[4])).cases[0].labels == {}  # unlabelled

    # exact case id or accession number only (issue 23, finding 6: a prefix is an oracle)
    prefix = str(ids[12])[:-1] if len(str(ids[12])) > 1 else str(ids[12])
    found = store.find_cases(text=prefix, limit=1000)
    by_id = {i for i in ids.values() if str(i) == prefix}
    by_accession = {ids[i] for i in range(N) if i % 10 and f"ACC{i:05d}" == prefix}
    assert {c.image_id for c in found.cases} == by_id | by_accession
    assert {c.image_id for c in store.find_cases(text=str(ids[12])).cases} == {ids[12]}
    # accession number, case-insensitive, whole; a prefix or a wildcard finds nothing
    found = store.find_cases(text="acc00121", limit=1000)
    assert {case_of[c.image_id] for c in found.cases} == {121}
    assert store.find_cases(text="acc0012").total == 0
    assert store.find_cases(text="Acc%").total == 0
    assert store.find_cases(text="Acc_0001").total == 0
    assert store.find_cases(text="9" * 400).total == 0  # no integer overflow, no error
    # case 121's Edema label is negative (121 % 4 == 1): the status narrows the exact match
    combined = store.find_cases(text="Acc00121", finding="Edema", status="negative")
    assert {case_of[c.image_id] for c in combined.cases} == {121}
    assert store.find_cases(text="Acc00121", finding="Edema", status="positive").total == 0
    assert store.find_cases(encoder_id="fake:other").total == 0
    assert store.find_cases(encoder_id="fake:a").total == N

    # thumbnails: batch read, missing ones listed, PNG size from the header
    wanted = [ids[0], ids[1], ids[2]]
    thumbs = store.read_thumbnails(wanted)
    assert sorted(thumbs) == [ids[0], ids[2]] and thumbs[ids[2]] == png(2)
    needing = store.images_needing_thumbnail()
    assert [i for i, _ in needing] == sorted(ids[i] for i in range(1, N, 2))
    assert needing[0][1] == "/archive/1.dcm"
    assert store.images_needing_thumbnail(max_side=16)[0][0] == ids[0]  # other size
    assert store.put_thumbnails({ids[1]: Thumbnail(png(9, 5, 3), 8)}) == 1
    assert store.put_thumbnails({ids[1]: Thumbnail(png(10), 8)}) == 0  # kept unless replace
    assert store.put_thumbnails({ids[1]: Thumbnail(png(10), 8)}, replace=True) == 1
    assert store.read_thumbnail(ids[1]) == png(10)
    sizes = store.execute_readonly_sql(
        f"SELECT pixel_rows, pixel_columns, max_side FROM thumbnails WHERE image_id = {ids[1]}"
    )
    assert sizes == [(6, 4, 8)]
