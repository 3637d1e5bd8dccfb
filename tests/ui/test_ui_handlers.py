"""The UI's handlers without Gradio: query loading, the case picker, one ranking with percentiles
and the optional cosine baseline, filters, feedback, explanations, uploads, the compare viewer,
escaping and PHI-minimal display."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ui_fakes import SENTENCES, D, make_service, write_png

from chexretrieve.search.explain import AnchorTerm, Explanation
from chexretrieve.search.gallery import SearchFilters
from chexretrieve.ui.case_picker import parse_case_id
from chexretrieve.ui.compare import CompareViewer
from chexretrieve.ui.handlers import CaseLookup, SearchSettings, parse_filters
from chexretrieve.ui.render import esc, explanation_html, placeholder, plain_explanation
from chexretrieve.ui.results_html import ResultRow, percentiles, ranks, results_html

FINDING = "Pleural Effusion"
XSS = "<script>window.__xss = 1</script>"


@pytest.fixture
def lookup(tmp_path):
    service = make_service(tmp_path)
    return CaseLookup(service, thumbnail_px=32, case_page_size=10)


def test_handlers_do_not_import_gradio():
    code = (
        "import sys, chexretrieve.ui, chexretrieve.ui.handlers, chexretrieve.ui.curation, "
        "chexretrieve.ui.reports, chexretrieve.ui.commands, chexretrieve.ui.config, "
        "chexretrieve.ui.compare, chexretrieve.ui.viewer, chexretrieve.ui.case_picker, "
        "chexretrieve.ui.results_html, chexretrieve.ui.radiology_reports, "
        "chexretrieve.ui.upload_errors, chexretrieve.ui.thumbnails, chexretrieve.ui.page_scripts; "
        "print('gradio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_case_picker_pages_through_every_case_with_labels(lookup):
    first = lookup.case_page(finding=FINDING)
    assert [v for _, v in first.choices] == list(range(1, 11))
    assert (first.page, first.pages, first.total) == (0, 3, 30)
    assert first.summary == "cases 1–10 of 30 (page 1 of 3)"
    label = first.choices[0][0]
    word = {1.0: "positive", 0.0: "negative", -1.0: "uncertain"}
    value = lookup.gallery.labels.loc[1, FINDING]
    expected = "not mentioned" if np.isnan(value) else word[value]
    assert label == f"case 1 · AP · M 30 · 2021-01-01 · {FINDING}: {expected}"
    last = lookup.case_page(finding=FINDING, page=2)
    assert [v for _, v in last.choices] == list(range(21, 31))
    assert lookup.case_page(page=99).page == 2  # past the end: the last page
    assert not any("SECRET" in text or "img" in text for text, _ in first.choices)


def test_case_picker_filters_by_label_status_and_exact_id(lookup):
    labels = lookup.gallery.labels[FINDING]
    positive = lookup.case_page(finding=FINDING, status="positive")
    assert positive.total == int((labels == 1.0).sum())
    assert all(labels.loc[i] == 1.0 for _, i in positive.choices)
    assert "label positive" in positive.summary
    blank = lookup.case_page(finding=FINDING, status="blank")
    assert blank.total == int(labels.isna().sum())
    exact = lookup.case_page("2")  # the exact id only, never 20..29 (no prefix oracle)
    assert [v for _, v in exact.choices] == [2]
    assert exact.total == 1 and "id or accession '2' (exact)" in exact.summary
    none = lookup.case_page("777")
    assert none.total == 0 and none.summary == "no case matches · id or accession '777' (exact)"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "type a case id"),
        ("2.5", "a case id is a whole number such as 12, not '2.5'"),
        ("-3", "a case id is a whole number"),
        ("0", "case ids start at 1"),
        ("1e3", "a case id is a whole number"),
    ],
)
def test_typed_case_ids_are_read_strictly(value, message):
    with pytest.raises(ValueError, match=message):
        parse_case_id(value)


def test_typed_case_ids_and_accession_numbers():
    assert parse_case_id(" 12 ") == 12
    assert parse_case_id("PHA000100000013") is None  # not a number: an accession number


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "type a case id"),
        ("abc", "no case with id or accession number 'abc'"),
        (999, "there is no case 999 in this archive \\(30 cases, ids 1–30\\)"),
        (2.5, "a case id is a whole number such as 12, not 2.5"),
        ("2.5", "a case id is a whole number such as 12, not '2.5'"),
    ],
)
def test_load_case_bad_input_names_the_problem(lookup, value, message):
    with pytest.raises(ValueError, match=message):
        lookup.load_case(value)


def test_load_case_carries_labels_and_the_preview(lookup):
    query = lookup.load_case("4")
    assert query.case_id == 4 and query.source == "case" and query.embedding is None
    assert query.pixels.shape == (96, 96)  # 48 px source shown at 3 thumbnails
    stored = lookup.gallery.labels.loc[4]
    assert set(query.labels) == set(stored.index)
    assert all(query.labels[f] == v or (np.isnan(v) and np.isnan(query.labels[f]))
               for f, v in stored.items())  # fmt: skip
    assert lookup.render_query(query).dtype == np.uint8
    html = lookup.query_details(query, FINDING)
    assert "Labels" in html and FINDING in html and "No report text" in html


def test_unreadable_archive_file_shows_a_placeholder(lookup):
    path = lookup.gallery.metadata.loc[3, "source_path"]
    with open(path, "wb") as handle:
        handle.write(b"not an image")
    query = lookup.load_case(3)
    assert "not readable" in query.notes[0]
    thumb = lookup.case_thumbnail(3)
    assert thumb.shape == (32, 32) and thumb.dtype == np.uint8
    page = lookup.search(query, SearchSettings(FINDING, "softmax"))
    assert len(page.image_ids) == 12  # the stored embedding is still searched


def test_thumbnails_are_read_once_and_persisted(tmp_path):
    service = make_service(tmp_path)
    folder = tmp_path / "thumbs"
    first = CaseLookup(service, thumbnail_px=32, thumbnail_dir=folder)
    first.prefetch_thumbnails([3, 4, 3, 5])
    files = sorted(p.name for p in folder.iterdir())
    digest = service.gallery.metadata["pixel_sha256"]
    assert files == sorted(f"{i}-{digest.loc[i][:16]}-32.png" for i in (3, 4, 5))
    shown = first.case_thumbnail(4)
    assert shown.shape == (32, 32) and shown.dtype == np.uint8
    assert first.thumbnail_uri(4).startswith("data:image/png;base64,")
    # a new server (empty memory) with the archived file gone still shows the persisted one
    Path(service.gallery.metadata.loc[4, "source_path"]).unlink()
    again = CaseLookup(service, thumbnail_px=32, thumbnail_dir=folder)
    np.testing.assert_array_equal(again.case_thumbnail(4), shown)
    assert again.case_thumbnail(4).std() > 0
    memory_only = CaseLookup(service, thumbnail_px=32)
    assert (memory_only.case_thumbnail(4) == placeholder(32)).all()


def test_one_ranking_with_percentiles_against_a_naive_count(lookup):
    query = lookup.load_case(5)
    settings = SearchSettings(FINDING, "softmax", top_k=8)
    page = lookup.search(query, settings)
    direct = lookup.service.search(lookup._request(query, settings, "softmax"))
    assert page.image_ids == tuple(h.image_id for h in direct.hits)
    assert 5 not in page.image_ids and 6 not in page.image_ids  # the query's own study
    scores, eligible = lookup.service.gallery_scores(lookup._request(query, settings, "softmax"))
    gallery = lookup.gallery
    others = [scores[r] for r in range(len(gallery)) if eligible[r]]
    for row in page.rows:
        own = scores[gallery.row_of(row.hit.image_id)]
        lower = sum(1 for s in others if s < own)
        assert row.percentile == pytest.approx(100 * lower / (len(others) - 1))
    assert page.rows[0].percentile == pytest.approx(100.0)
    assert [r.percentile for r in page.rows] == sorted(
        (r.percentile for r in page.rows), reverse=True
    )
    assert page.html.count("<button type='button' class='cx-card") == 8
    assert page.html.count("<tr class='cx-row") == 8
    assert "cosine (baseline)" not in page.html and "percentile" in page.legend
    assert page.title.startswith(f"{FINDING} · Softmax · anchors fake_set.a@1 · 28 candidate cases")


def test_percentiles_and_ranks_count_the_other_candidates():
    scores = np.array([0.1, 0.5, 0.5, 0.9, -1.0])
    eligible = np.array([True, True, True, True, False])  # the last row is filtered out
    assert percentiles(scores, eligible, [3, 1, 0]) == [100.0, pytest.approx(100 / 3), 0.0]
    assert ranks(scores, eligible, [3, 1, 2, 0]) == [1, 2, 2, 4]
    assert percentiles(scores, np.array([False, False, False, True, False]), [3]) == [100.0]


def test_the_cosine_baseline_column_gives_each_results_cosine_rank(lookup):
    query = lookup.load_case(5)
    page = lookup.search(query, SearchSettings(FINDING, "gaussian", top_k=6), baseline=True)
    gallery = lookup.gallery
    q = gallery.embeddings[gallery.row_of(5)].astype(np.float64)
    cosine = {int(i): float(gallery.embeddings[gallery.row_of(i)] @ q) for i in gallery.image_ids}
    allowed = sorted((i for i in cosine if i not in (5, 6)), key=lambda i: -cosine[i])
    for row in page.rows:
        assert row.baseline_rank == allowed.index(row.hit.image_id) + 1
    assert page.baseline and "cosine (baseline)" in page.html and "Cosine (baseline)" in page.legend
    # under cosine itself there is one ranking and no baseline column
    plain = lookup.search(query, SearchSettings(FINDING, "cosine", top_k=6), baseline=True)
    assert not plain.baseline and "cosine (baseline)" not in plain.html
    assert list(plain.image_ids) == allowed[:6]
    assert "no anchors" in plain.title


def test_progress_hears_each_step_in_order(lookup):
    heard = []
    query = lookup.load_case(7)
    lookup.search(query, SearchSettings(FINDING, "latent_spherical"), baseline=True,
                  progress=lambda f, what: heard.append((f, what)))  # fmt: skip
    fractions = [f for f, _ in heard]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    steps = " | ".join(what for _, what in heard)
    assert "embedding the anchors, fitting and ranking 30 cases" in steps
    assert "Cosine baseline" in steps and "Thumbnails" in steps


def test_geometries_rank_differently(lookup):
    query = lookup.load_case(7)
    soft = lookup.search(query, SearchSettings(FINDING, "softmax"))
    gauss = lookup.search(query, SearchSettings(FINDING, "gaussian"))
    assert soft.image_ids != gauss.image_ids
    with pytest.raises(ValueError, match="unknown geometry"):
        lookup.search(query, SearchSettings(FINDING, "euclid"))
    with pytest.raises(ValueError, match="no query yet"):
        lookup.search(None, SearchSettings(FINDING, "softmax"))


def test_filters_from_widgets_apply_to_the_ranking(lookup):
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
    page = lookup.search(query, SearchSettings(FINDING, "softmax", filters=filters))
    assert page.rows
    for row in page.rows:
        assert row.hit.metadata["view_position"] == "AP" and row.hit.metadata["patient_sex"] == "M"
        assert row.hit.labels[FINDING] is not None
    assert parse_filters(None, "any", None, "", "", None, False) == SearchFilters()
    assert parse_filters([], "any", 0, 120, None, None, False) == SearchFilters()
    assert parse_filters([], "any", 0, 50, None, None, False).age_max == 50.0


def test_bad_filter_values_are_named():
    with pytest.raises(ValueError, match="'date from' must be a date like 2024-03-31"):
        parse_filters([], "any", None, None, "31/12/2021", None, False)
    with pytest.raises(ValueError, match="age range is empty"):
        parse_filters([], "any", 80, 20, None, None, False)


def test_relevance_feedback_reranks_and_keeps_the_selected_case_highlighted(lookup):
    query = lookup.load_case(9)
    settings = SearchSettings(FINDING, "softmax", top_k=10)
    before = lookup.search(query, settings)
    liked, disliked = before.image_ids[-1], before.image_ids[0]
    after = lookup.search(query, settings, relevant=[liked], not_relevant=[disliked],
                          selected=liked)  # fmt: skip
    assert after.image_ids != before.image_ids
    assert after.image_ids.index(liked) < before.image_ids.index(liked)
    # the highlight is on the selected case at its new rank, nowhere else
    assert after.html.count("cx-selected") == 2  # its card and its table row
    assert f"cx-card cx-selected' data-case='{liked}'" in after.html
    assert f"cx-row cx-selected' data-case='{liked}'" in after.html
    text = CaseLookup.feedback_text((liked,), (disliked,))
    assert str(liked) in text and str(disliked) in text


def test_explanation_escapes_anchor_sentences_and_says_it_plainly(lookup):
    query = lookup.load_case(1)
    html = lookup.explain(query, SearchSettings(FINDING, "softmax"), 12)
    assert "Why case 12 is close to case 1" in html
    assert "Both images weigh ‘" in html
    assert "<script" not in html
    assert html.count("<tr>") == 12  # two header rows, 5 shared + 5 differing anchors
    term = AnchorTerm(SENTENCES[-1], 0.5, 0.25, 0.1)
    shown = explanation_html(Explanation((term,), (term,), 0.1), "case <1>", 2, FINDING, "k@1")
    assert "<script" not in shown and esc(SENTENCES[-1]) in shown
    assert "case &lt;1&gt;" in shown and "&#124;" in shown


def test_plain_explanation_names_the_sentences_both_weigh_and_the_one_apart():
    shared = (
        AnchorTerm("moderate right effusion", 0.41, 0.37, 0.0004),
        AnchorTerm("blunted right costophrenic angle", 0.22, 0.25, 0.0002),
    )
    apart = (AnchorTerm("no effusion", 0.02, 0.19, 0.21),)
    line = plain_explanation(Explanation(shared, apart, 0.25), "case 5")
    assert line.startswith(
        "Both images weigh ‘moderate right effusion’ and ‘blunted right costophrenic angle’ most"
    )
    assert "They differ most on ‘no effusion’, which the result weighs more (0.02 vs 0.19)" in line
    calm = plain_explanation(Explanation(shared, (AnchorTerm("x", 0.1, 0.1, 0.0),), 0.5))
    assert "differ" not in calm


def test_details_are_phi_minimal_and_escaped(lookup):
    html = lookup.result_details(4, finding=FINDING)
    for shown in ("<td>AP</td>", "<td>F</td>", "33 years", "2021-01-28", "Acme", "48 × 48"):
        assert shown in html
    assert "Labels" in html and "Report" in html
    assert "SECRET" not in html and "img" not in html and "1.2.3" not in html
    meta = dict(lookup.gallery.metadata.loc[4])
    meta["manufacturer"] = XSS
    meta["view_position"] = '"><img src=x onerror=alert(1)>'
    hit = type("Hit", (), {"rank": 1, "image_id": 4, "score": 0.5, "metadata": meta,
                           "labels": {FINDING: 1.0}})()  # fmt: skip
    row = ResultRow(hit, 99.0, "data:image/png;base64,", report=XSS)
    table = results_html([row], "t", FINDING, "legend")
    assert "<img src=x" not in table and "&lt;img src=x onerror=alert(1)&gt;" in table
    assert "<script" not in table and "positive" in table


def test_upload_png_is_embedded_deleted_and_never_finds_its_own_pixels(lookup, tmp_path):
    path = tmp_path / "upload.png"
    pixels = write_png(path, seed=4)  # the same pixels as archived case 4
    query = lookup.load_upload(str(path))
    assert not path.exists()
    assert query.source == "upload" and query.case_id is None and query.values is not None
    expected = lookup.service.encoder.embed_images([pixels])[0]
    np.testing.assert_allclose(query.embedding, expected, atol=1e-6)
    page = lookup.search(query, SearchSettings(FINDING, "cosine"))
    assert 4 not in page.image_ids  # its own image is not a result (issue 15, defect 1)
    assert "Query: upload upload.png" in lookup.query_details(query)  # its file name (issue 34)


def test_upload_of_a_non_image_is_refused_in_the_words_of_an_upload(lookup, tmp_path):
    path = tmp_path / "notes.dcm"
    path.write_text("hello", encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        lookup.load_upload(str(path))
    message = str(refused.value)
    assert message.startswith("The uploaded file 'notes.dcm' is not a DICOM, PNG or JPEG image")
    assert "archive" not in message and "ingest" not in message
    assert "upload a DICOM, PNG or JPEG chest radiograph" in message
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
    assert query.study_uid == derive_uid("s")
    html = lookup.query_details(query)
    assert "<script" not in html and "<b>" not in html
    assert esc(XSS) in html and "&lt;b&gt;CHEST&lt;/b&gt;" in html
    assert "54 years" in html and "2024-01-02" in html
    assert "Doe" not in html and "SECRET" not in html


def test_anchor_set_choices_default_to_the_latest_as_search_does(tmp_path):
    import shutil

    root = tmp_path / "anchors"
    source = Path(__file__).resolve().parents[2] / "anchors" / "findings" / "pleural_effusion"
    shutil.copytree(source, root / "findings" / "pleural_effusion")
    lookup = CaseLookup(service=None, anchors_dir=root)
    choices, default = lookup.anchor_set_choices("pleural effusion")
    assert default == "pleural_effusion.a@1" and len(choices) == 5
    assert choices[0] == ("pleural_effusion.a@1 · latest", "pleural_effusion.a@1")
    text = (root / "findings" / "pleural_effusion" / "v1-a.yaml").read_text()
    (root / "findings" / "pleural_effusion" / "v2-a.yaml").write_text(
        text.replace("version: 1", "version: 2", 1)
    )
    choices, default = lookup.anchor_set_choices("Pleural Effusion")
    assert default == "pleural_effusion.a@2"  # what search uses when no version is named
    from chexretrieve.anchors import latest_anchor_set

    assert latest_anchor_set("Pleural Effusion", root=root).key == default
    assert choices[:2] == [("pleural_effusion.a@2 · latest", default),
                           ("pleural_effusion.a@1", "pleural_effusion.a@1")]  # fmt: skip


def test_the_compare_viewer_renders_both_and_records_the_view(lookup, tmp_path):
    from chexretrieve.audit import AuditLog

    audit = AuditLog(tmp_path / "audit.jsonl")
    lookup.audit = audit
    viewer = CompareViewer(lookup, viewer_px=256)
    query = lookup.load_case(5, user="dr.view")
    page = lookup.search(query, SearchSettings(FINDING, "softmax"))
    picked = page.image_ids[1]
    shown = viewer.open(query, picked, SearchSettings(FINDING), None, 2, user="dr.view")
    assert shown.title == f"Case 5 beside #2 · case {picked}"
    assert shown.images_html.count("class='cx-view-img'") == 2
    assert "Each image under its own default window" in shown.images_html
    assert "Why case" in shown.details_html and "Labels" in shown.details_html
    views = [(e["action"], e.get("what"), e.get("image")) for e in audit.entries()]
    assert views[0] == ("view", "query", 5) and views[-1] == ("view", "viewer", picked)
    again = viewer.render(query, picked, None, 2, preset="lung")
    assert again.count("(lung preset on its own values)") == 2  # the read-out, per image
    assert "cx-preset cx-on' data-preset='lung'" in again
    assert len(audit.entries()) == len(views)  # a window change is not a new view
    alone = viewer.open(query, None, SearchSettings(FINDING))
    assert "Select a result to compare" in alone.images_html


def test_the_explanation_says_which_sentences_deny_the_finding():
    shared = (
        AnchorTerm("No pleural fluid.", 0.30, 0.28, 0.0001, "negative"),
        AnchorTerm("Small left pleural effusion.", 0.12, 0.10, 0.0001, "positive"),
    )
    apart = (AnchorTerm("Large right effusion.", 0.02, 0.19, 0.21, "positive"),)
    explanation = Explanation(shared, apart, 0.25)
    line = plain_explanation(explanation, "case 5")
    assert line.startswith(
        "Both images weigh ‘No pleural fluid.’ (finding absent) and "
        "‘Small left pleural effusion.’ (finding present) most"
    )
    assert "differ most on ‘Large right effusion.’ (finding present)" in line
    html = explanation_html(explanation, "case 5", 2, FINDING, "k@1")
    assert html.count("<span class='cx-label cx-negative'>finding absent</span>") == 1
    assert html.count("<span class='cx-label cx-positive'>finding present</span>") == 2


def test_posterior_latent_geometries_are_not_cosine_and_a_cosine_twin_is_refused(lookup):
    """Issue 24 defect 1: the posterior latent geometries ranked exactly as cosine (k = d). With
    k by the 95%-variance rule they rank differently; an anchor set whose rule lands on k = d is
    refused with a message (the page shows a ValueError's text) instead of a cosine ranking."""
    from chexretrieve.geometry import CosineEquivalentGeometryError
    from chexretrieve.search.service import AnchorSetRef

    query = lookup.load_case(7)
    cosine = lookup.search(query, SearchSettings(FINDING, "cosine"))
    for geometry in ("latent_gaussian_posterior", "latent_spherical_posterior"):
        assert lookup.search(query, SearchSettings(FINDING, geometry)).image_ids != (
            cosine.image_ids
        )
    anchors = lookup.service.anchors
    isotropic = np.vstack([np.eye(D), -np.eye(D)])
    anchors.anchor_set = lambda finding, key: AnchorSetRef(
        key="iso@1",
        content_hash="iso",
        sentences=tuple(f"sentence {i}" for i in range(2 * D)),
        embeddings=isotropic,
    )
    with pytest.raises(CosineEquivalentGeometryError, match="ranks exactly as cosine"):
        lookup.search(query, SearchSettings(FINDING, "latent_spherical_posterior"))


def test_the_unlike_archive_note_scans_the_embeddings_only_when_it_is_shown(lookup, monkeypatch):
    """The nearest-neighbour note ("unlike this archive") yields to the archive density's own
    typicality line; its scan of every embedding (2 GB at a million images, for each new query)
    is made only when the note can be shown."""
    from chexretrieve.density.provider import QueryDensity

    calls = []
    monkeypatch.setattr(lookup.service, "nearest_cosine", lambda r: calls.append(r) or -1.0)
    settings = SearchSettings(FINDING, "softmax", top_k=8)
    plain = lookup.search(lookup.load_case(5), settings)
    assert plain.result.density is None and len(calls) == 1
    assert "is unlike this archive" in plain.html  # nearest -1: below every archived image's

    typical = QueryDensity(
        log_density=3.0,
        percentile=40.0,
        threshold=1.0,
        ood_percentile=1.0,
        ood=False,
        stale=False,
        revision=1,
        n_images=30,
        n_components=2,
    )

    class Density:
        def assess(self, query, gallery):
            return typical

    monkeypatch.setattr(lookup.service, "density", Density())
    assessed = lookup.search(lookup.load_case(7), settings)
    assert len(calls) == 1  # not scanned again
    assert "is unlike this archive" not in assessed.html
    assert "How typical of this archive" in assessed.html  # the density's line speaks instead


def test_percentiles_from_the_rankings_standing_equal_those_from_every_score():
    """SearchResult.standing (candidates at least as high, ties included) gives the percentiles
    a count over every candidate's score gives, ties included."""
    from chexretrieve.ui.results_html import standing_percentiles

    scores = np.array([0.1, 0.5, 0.5, 0.9, -1.0, 0.5])
    eligible = np.array([True, True, True, True, False, True])
    pool = scores[eligible]
    rows = [3, 1, 2, 5, 0]
    standing = [int(np.count_nonzero(pool >= scores[r])) for r in rows]
    assert standing_percentiles(standing, int(eligible.sum())) == percentiles(
        scores, eligible, rows
    )
    assert standing_percentiles([1], 1) == [100.0] and standing_percentiles([], 0) == []


def test_a_ranking_without_a_standing_falls_back_to_every_candidates_score(lookup, monkeypatch):
    """An ANN or sharded ranking carries no exact standing: the page then scores every candidate
    for the percentiles, and they equal the exact ranking's."""
    import dataclasses

    query = lookup.load_case(5)
    settings = SearchSettings(FINDING, "softmax", top_k=8)
    exact = lookup.search(query, settings)
    search = lookup.service.search
    monkeypatch.setattr(
        lookup.service, "search",
        lambda *a, **kw: dataclasses.replace(search(*a, **kw), standing=None),
    )  # fmt: skip
    calls = []
    scores_of = lookup.service.gallery_scores
    monkeypatch.setattr(lookup.service, "gallery_scores", lambda r: calls.append(r) or scores_of(r))
    fallback = lookup.search(query, settings)
    assert len(calls) == 1
    assert [r.percentile for r in fallback.rows] == [r.percentile for r in exact.rows]
    assert fallback.image_ids == exact.image_ids


def test_unreadable_cases_share_one_placeholder_encoded_once(lookup, monkeypatch):
    """Cases whose files cannot be read show the placeholder; its PNG is encoded once, and each
    case's data URI decodes to the placeholder's pixels (PIL, not our encoder, decodes it)."""
    import base64
    import io

    from PIL import Image

    import chexretrieve.ui.thumbnails as thumbnails_module
    from chexretrieve.ui.render import placeholder

    for i in (3, 4, 5):
        Path(lookup.gallery.metadata.loc[i, "source_path"]).unlink()
    encoded = []
    real = thumbnails_module.png_data_uri
    monkeypatch.setattr(thumbnails_module, "png_data_uri", lambda p: encoded.append(1) or real(p))
    uris = [lookup.thumbnail_uri(i) for i in (3, 4, 5)]
    assert len(encoded) == 1 and len(set(uris)) == 1
    png = base64.b64decode(uris[0].split(",", 1)[1])
    shown = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    np.testing.assert_array_equal(shown, placeholder(lookup.thumbnail_px))
    with pytest.raises(ValueError):  # shared: nobody may draw on it
        lookup.case_thumbnail(3)[0, 0] = 0
