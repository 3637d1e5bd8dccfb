"""The UI's handlers without Gradio: query loading, windowing, search pairs, filters, feedback,
explanations, escaping and PHI-minimal display."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ui_fakes import SENTENCES, make_service, write_png

from chexretrieve.search.explain import AnchorTerm, Explanation
from chexretrieve.search.gallery import SearchFilters
from chexretrieve.ui.handlers import CaseLookup, SearchSettings, parse_filters
from chexretrieve.ui.render import esc, explanation_html, hits_table_html, placeholder

FINDING = "Pleural Effusion"
XSS = "<script>window.__xss = 1</script>"


@pytest.fixture
def lookup(tmp_path):
    service = make_service(tmp_path)
    return CaseLookup(service, thumbnail_px=32, case_list_limit=10)


def test_handlers_do_not_import_gradio():
    code = (
        "import sys, chexretrieve.ui, chexretrieve.ui.handlers, chexretrieve.ui.curation, "
        "chexretrieve.ui.reports, chexretrieve.ui.commands, chexretrieve.ui.config; "
        "print('gradio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_case_choices_are_limited_and_phi_minimal(lookup):
    choices = lookup.case_choices()
    assert [v for _, v in choices] == list(range(1, 11))
    label = choices[0][0]
    assert label.startswith("case 1 · AP · M 30 · 2021-01-01")
    assert not any("SECRET" in text or "img" in text for text, _ in choices)


def test_load_case_and_window_match_a_naive_window(lookup):
    query = lookup.load_case("4")
    assert query.case_id == 4 and query.source == "case" and query.embedding is None
    # 48 px source shown at 3 thumbnails (96 px) on the longer side
    assert query.pixels.shape == (96, 96)
    center, width = 0.3, 0.2
    shown = lookup.render_query(query, center, width)
    naive = np.clip(np.rint((query.pixels - (center - width / 2)) * (255 / width)), 0, 255)
    np.testing.assert_array_equal(shown, naive.astype(np.uint8))
    assert shown.dtype == np.uint8
    # a narrower window raises contrast: more pixels clip to black or white
    full = lookup.render_query(query, 0.5, 1.0)
    assert ((shown == 0) | (shown == 255)).sum() > ((full == 0) | (full == 255)).sum()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "enter an archived case id"),
        ("abc", "case id must be a whole number"),
        (999, "case 999 is not in the archive"),
    ],
)
def test_load_case_bad_input_names_the_problem(lookup, value, message):
    with pytest.raises(ValueError, match=message):
        lookup.load_case(value)


def test_unreadable_archive_file_shows_a_placeholder(lookup):
    path = lookup.gallery.metadata.loc[3, "source_path"]
    with open(path, "wb") as handle:
        handle.write(b"not an image")
    query = lookup.load_case(3)
    assert "not readable" in query.notes[0]
    thumb = lookup.case_thumbnail(3)
    assert thumb.shape == (32, 32) and thumb.dtype == np.uint8
    result = lookup.search(query, SearchSettings(FINDING, "softmax"))
    assert len(result[1].image_ids) == 12  # the stored embedding is still searched


def test_thumbnails_are_read_once_and_persisted(tmp_path):
    service = make_service(tmp_path)
    folder = tmp_path / "thumbs"
    first = CaseLookup(service, thumbnail_px=32, thumbnail_dir=folder)
    first.prefetch_thumbnails([3, 4, 3, 5])
    files = sorted(p.name for p in folder.iterdir())
    assert files == [f"{i}-{i:016x}-32.png" for i in (3, 4, 5)]
    shown = first.case_thumbnail(4)
    assert shown.shape == (32, 32) and shown.dtype == np.uint8
    # a new server (empty memory) with the archived file gone still shows the persisted one
    Path(service.gallery.metadata.loc[4, "source_path"]).unlink()
    again = CaseLookup(service, thumbnail_px=32, thumbnail_dir=folder)
    np.testing.assert_array_equal(again.case_thumbnail(4), shown)
    # without a persisted copy an unreadable file shows the placeholder
    assert again.case_thumbnail(4).std() > 0
    memory_only = CaseLookup(service, thumbnail_px=32)
    assert (memory_only.case_thumbnail(4) == placeholder(32)).all()


def test_search_gives_cosine_beside_the_chosen_geometry(lookup):
    query = lookup.load_case(5)
    cos, geo = lookup.search(query, SearchSettings(FINDING, "softmax", top_k=8))
    gallery = lookup.gallery
    # cosine order against a naive reference; the query's study (images 5 and 6) is excluded
    q = gallery.embeddings[gallery.row_of(5)].astype(np.float64)
    sims = gallery.embeddings.astype(np.float64) @ q
    allowed = [i for i in gallery.image_ids if i not in (5, 6)]
    expected = sorted(allowed, key=lambda i: (-sims[gallery.row_of(i)], i))[:8]
    assert list(cos.image_ids) == expected
    direct = lookup.service.search(
        lookup._request(query, SearchSettings(FINDING, "softmax", top_k=8), "softmax")
    )
    assert list(geo.image_ids) == [h.image_id for h in direct.hits]
    assert cos.title.startswith("no anchors") and geo.title.startswith("softmax · fake_set.a@1")
    assert len(geo.items) == 8 and geo.items[0][0].dtype == np.uint8
    assert geo.items[0][1] == f"#1 · case {geo.image_ids[0]}"
    assert geo.table_html.count("<tr>") == 9  # header + 8 results


def test_geometries_rank_differently(lookup):
    query = lookup.load_case(7)
    _, soft = lookup.search(query, SearchSettings(FINDING, "softmax"))
    _, gauss = lookup.search(query, SearchSettings(FINDING, "gaussian"))
    assert soft.image_ids != gauss.image_ids
    with pytest.raises(ValueError, match="unknown geometry"):
        lookup.search(query, SearchSettings(FINDING, "euclid"))


def test_filters_from_widgets_apply_to_both_rankings(lookup):
    filters = parse_filters(["AP"], "M", 30, 60, "2021-01-01", "2021-12-31", True)
    assert filters == SearchFilters(
        views=("AP",),
        sex="M",
        age_min=30.0,
        age_max=60.0,
        date_from=dt.date(2021, 1, 1),
        date_to=dt.date(2021, 12, 31),
        label_known=True,
    )
    query = lookup.load_case(2)
    for view in lookup.search(query, SearchSettings(FINDING, "softmax", filters=filters)):
        assert view.result.hits
        for hit in view.result.hits:
            assert hit.metadata["view_position"] == "AP" and hit.metadata["patient_sex"] == "M"
            assert hit.labels[FINDING] is not None
    assert parse_filters(None, "any", None, "", "", None, False) == SearchFilters()
    # the age widgets start at 0 and 120: those ends are no bound (unknown ages are kept)
    assert parse_filters([], "any", 0, 120, None, None, False) == SearchFilters()
    assert parse_filters([], "any", 0, 50, None, None, False).age_max == 50.0


def test_bad_filter_values_are_named():
    with pytest.raises(ValueError, match="'date from' must be a date like 2024-03-31"):
        parse_filters([], "any", None, None, "31/12/2021", None, False)
    with pytest.raises(ValueError, match="age range is empty"):
        parse_filters([], "any", 70, 20, None, None, False)


def test_relevance_feedback_reranks_and_is_marked(lookup):
    query = lookup.load_case(9)
    settings = SearchSettings(FINDING, "softmax", top_k=10)
    _, before = lookup.search(query, settings)
    liked = before.image_ids[-1]
    disliked = before.image_ids[0]
    _, after = lookup.search(query, settings, relevant=[liked], not_relevant=[disliked])
    assert after.image_ids != before.image_ids
    assert after.image_ids.index(liked) < before.image_ids.index(liked)
    rows = {i: c for (_, c), i in zip(after.items, after.image_ids, strict=True)}
    assert rows[liked].endswith("✓")
    text = CaseLookup.feedback_text((liked,), (disliked,))
    assert str(liked) in text and str(disliked) in text


def test_explanation_escapes_anchor_sentences(lookup):
    query = lookup.load_case(1)
    html = lookup.explain(query, SearchSettings(FINDING, "softmax"), 12)
    assert "Why case 12 is close to case 1" in html
    assert "<script" not in html
    assert html.count("<tr>") == 12  # two header rows, 5 shared + 5 differing anchors
    # a sentence with markup is shown as text
    term = AnchorTerm(SENTENCES[-1], 0.5, 0.25, 0.1)
    shown = explanation_html(Explanation((term,), (term,), 0.1), "case <1>", 2, FINDING, "k@1")
    assert "<script" not in shown and shown.count(esc(SENTENCES[-1])) == 2
    assert "case &lt;1&gt;" in shown and "&#124;" in shown


def test_details_are_phi_minimal_and_escaped(lookup):
    html = lookup.result_details(4)
    for shown in ("<td>AP</td>", "<td>F</td>", "33 years", "2021-01-28", "Acme", "48 × 48"):
        assert shown in html
    assert "SECRET" not in html and "img" not in html and "1.2.3" not in html
    meta = dict(lookup.gallery.metadata.loc[4])
    meta["manufacturer"] = XSS
    meta["view_position"] = '"><img src=x onerror=alert(1)>'
    hits = [type("Hit", (), {"rank": 1, "image_id": 4, "score": 0.5, "metadata": meta,
                             "labels": {FINDING: 1.0}})()]  # fmt: skip
    table = hits_table_html(hits, FINDING)
    assert "<img" not in table and "&lt;img src=x onerror=alert(1)&gt;" in table
    assert "positive" in table


def test_upload_png_is_embedded_and_deleted(lookup, tmp_path):
    path = tmp_path / "upload.png"
    pixels = write_png(path, seed=4)
    query = lookup.load_upload(str(path))
    assert not path.exists()
    assert query.source == "upload" and query.case_id is None
    expected = lookup.service.encoder.embed_images([pixels])[0]
    np.testing.assert_allclose(query.embedding, expected, atol=1e-6)
    cos, geo = lookup.search(query, SearchSettings(FINDING, "softmax"))
    # the same pixels are archived as case 4: the upload finds it first under cosine
    assert cos.image_ids[0] == 4
    assert "Query: the uploaded image" in lookup.query_details(query)


def test_upload_of_a_non_image_is_refused_with_the_reason(lookup, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello", encoding="utf-8")
    with pytest.raises(ValueError, match="unsupported-format|not a"):
        lookup.load_upload(str(path))
    assert not path.exists()
    with pytest.raises(ValueError, match="choose a DICOM, PNG or JPEG file"):
        lookup.load_upload(None)


@pytest.mark.filterwarnings("ignore:Invalid value for VR CS")  # markup in a CS field, on purpose
def test_dicom_upload_with_markup_in_text_fields_is_inert(lookup, tmp_path):
    from chexretrieve.dicom.write import derive_uid, write_radiograph

    path = tmp_path / "hostile.dcm"
    values = np.tile(np.linspace(0, 4095, 40, dtype=np.uint16), (40, 1))
    write_radiograph(
        path,
        values,
        {
            "PatientID": "SECRET-PID-99",
            "PatientName": "Doe^Jane",
            "StudyInstanceUID": derive_uid("s"),
            "SeriesInstanceUID": derive_uid("se"),
            "SOPInstanceUID": derive_uid("so"),
            "Modality": "CR",
            "PatientSex": "F",
            "PatientAge": "054Y",
            "StudyDate": "20240102",
            "ViewPosition": "PA",
            "Manufacturer": XSS,
            "BodyPartExamined": "<b>CHEST</b>",
        },
    )
    query = lookup.load_upload(str(path))
    html = lookup.query_details(query)
    assert "<script" not in html and "<b>" not in html
    assert esc(XSS) in html and "&lt;b&gt;CHEST&lt;/b&gt;" in html
    assert "54 years" in html and "2024-01-02" in html
    assert "Doe" not in html and "SECRET" not in html


def test_anchor_set_choices_list_versions_newest_first(tmp_path):
    import shutil

    root = tmp_path / "anchors"
    source = Path(__file__).resolve().parents[2] / "anchors" / "findings" / "pleural_effusion"
    shutil.copytree(source, root / "findings" / "pleural_effusion")
    lookup = CaseLookup(service=None, anchors_dir=root)
    keys, default = lookup.anchor_set_choices("pleural effusion")
    assert default == "pleural_effusion.a@1"
    assert keys[0] == "pleural_effusion.a@1" and len(keys) == 5
