"""What a signed-in user can make the server do with what it sends (issue 23, findings 5, 6, 8).

Through the page's own event queue, as a script would: the query preview must come back as
in-page data and no file of the server be fetched by another client; the case picker must answer
only an exact case id or accession number (no prefix oracle) and audit every query; texts beyond
their cap and numbers that are NaN, infinite or huge must be refused with a message before any
work, and never reach the audit trail.
"""

from __future__ import annotations

import html
import json
import string

import adv_server as srv
import pytest

from chexretrieve.store import open_store

pytestmark = [
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
FINDING = "Pleural Effusion"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    built = srv.make_world(tmp_path_factory.mktemp("adv-inputs"))
    yield built
    srv.restore(built)


@pytest.fixture(scope="module")
def site(world):
    app, base = srv.launch(world)
    yield {"app": app, "base": base}
    app.close(verbose=False)


def _audit(world) -> list[dict]:
    return [json.loads(line) for line in world["audit"].read_text().splitlines()]


def _load(session, case: str, session_hash: str | None = None):  # noqa: ANN001, ANN202
    return srv.call(session, *srv.opening(session, case, FINDING), session_hash=session_hash)


def test_the_query_preview_is_in_page_data_and_no_file_is_served(site, world, cases):
    """Finding 5: the preview of an opened case is a data: PNG in the answer; every file in the
    server's temporary folder is refused to another signed-in client and to an anonymous one."""
    rad = srv.client(site["base"], "rad")
    status, message = _load(rad, "3")
    text = srv.answer_text(message)
    in_page = status == 200 and "data:image/png;base64," in text
    no_file = "file=" not in text and '"path"' not in text
    cases.check("the preview comes back as a data: PNG", in_page, text[:200])
    cases.check("the answer names no server file", no_file, text[:300])
    others = [srv.client(site["base"], "cur"), srv.client(site["base"])]
    # something of the app's own in the temp folder for sure: an upload, and a file where
    # Gradio would cache an image output (a PNG in a hash-named folder)
    dicom = next((world["root"] / "phantom").rglob("*.dcm"))
    rad.post(
        "gradio_api/upload", files={"files": ("q.dcm", dicom.read_bytes(), "application/dicom")}
    )
    cached = world["root"] / "gradio" / ("a" * 40) / "image.png"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    served = [p for p in (world["root"] / "gradio").rglob("*") if p.is_file()]
    fetched = []
    for path in served:
        for other in others:
            answer = other.get(f"gradio_api/file={path}")
            if answer.status_code not in (401, 403, 404) or answer.content[:4] == b"\x89PNG":
                fetched.append((str(path), answer.status_code))
    cases.check("no file of the server's temp folder fetched by another client", not fetched,
                str(fetched[:3]))  # fmt: skip
    cases.figure("temp files probed", len(served))
    views = [r for r in _audit(world) if r["action"] == "view" and r.get("image") == 3]
    cases.check("opening the case is audited with the user", any(r["user"] == "rad" for r in views))
    assert in_page and no_file and not fetched


def test_the_case_picker_is_no_accession_oracle_and_every_query_is_audited(site, world, cases):
    """Finding 6: prefixes list nothing; the exact accession lists its case; each query audited."""
    store = open_store(world["db_url"])
    accession = store.image_by_id(3).accession_number
    store.close()
    rad = srv.client(site["base"], "rad")
    index = srv.fn_index(rad, "pick-text", "submit")
    before = len(_audit(world))
    prefixes = [accession[:k] for k in range(1, len(accession))]
    prefixes += list(string.ascii_uppercase)  # (a digit alone is an exact case id: listed)
    listed = {}
    for prefix in prefixes:
        status, message = srv.call(rad, index, [prefix, "any", FINDING])
        listed[prefix] = "case " in srv.answer_text(message).split("no case matches")[0]
    status, exact = srv.call(rad, index, [accession.lower(), "any", FINDING])
    exact_text = srv.answer_text(exact)
    leaks = [p for p, shown in listed.items() if shown]
    cases.check(f"{len(prefixes)} prefixes of accession numbers list no case", not leaks,
                str(leaks[:5]))  # fmt: skip
    cases.check("the whole accession number lists its case", "case 3 ·" in exact_text,
                exact_text[:200])  # fmt: skip
    picker = [r for r in _audit(world)[before:] if r.get("what") == "picker"]
    audited = len(picker) == len(prefixes) + 1 and all(r["user"] == "rad" for r in picker)
    cases.check("every picker query is audited with the user and the text", audited,
                f"{len(picker)} records for {len(prefixes) + 1} queries")  # fmt: skip
    shown = [r for r in picker if r["picker"]["text"] == accession.lower()]
    cases.check("the audit lists the cases the picker showed", bool(shown)
                and shown[0]["images"] == [3], str(shown[:1]))  # fmt: skip
    assert not leaks and "case 3 ·" in exact_text and audited


BIG = "x" * 10_000_000


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ("free text of 10 MB", "the free text is 10,000,000 characters long; at most 500"),
        ("case id of 10 MB", "at most 64 are accepted"),
        ("case id of 5000 digits", "at most 64 are accepted"),
        ("case id of 30 digits", "a case id has at most 18 digits"),
        ("picker text of 10 MB", "at most 64 are accepted"),
        ("age NaN", "'age from' must be a number of years between 0 and 120, not NaN"),
        ("age -inf", "'age from' must be between 0 and 120 years, not -infinity"),
        ("age 10**400 as text", "'age to' is 401 characters long; at most 32"),
        ("age 10**30", "'age to' must be between 0 and 120 years, not 1e+30"),
        ("date of 10 MB", "'date from' is 10,000,000 characters long"),
    ],
)
def test_oversized_text_and_bad_numbers_are_refused_before_any_work(site, world, cases, what,
                                                                    expected):  # fmt: skip
    """Finding 8: each refused with a message; the server answers the next action; the audit
    grows by no more than a short record and never carries the text."""
    rad = srv.client(site["base"], "rad")
    size_before = world["audit"].stat().st_size
    session = "s" + "".join(c for c in what if c.isalnum())[:10]  # as the page's: [a-z0-9]
    if what.startswith("case id"):
        value = BIG if "MB" in what else "7" * (5000 if "5000" in what else 30)
        status, message = _load(rad, value)
    elif what.startswith("picker"):
        status, message = srv.call(rad, srv.fn_index(rad, "pick-text", "submit"),
                                   [BIG, "any", FINDING])  # fmt: skip
    else:
        status, loaded = _load(rad, "2", session_hash=session)
        assert status == 200 and loaded.get("success", True), loaded
        index = srv.fn_index(rad, "search", "click")
        values = {"free text of 10 MB": {"free-text": BIG},
                  "age NaN": {"f-age-min": float("nan")},
                  "age -inf": {"f-age-min": float("-inf")},
                  "age 10**400 as text": {"f-age-max": "1" + "0" * 400},
                  "age 10**30": {"f-age-max": 10**30},
                  "date of 10 MB": {"f-date-from": BIG}}[what]  # fmt: skip
        size_before = world["audit"].stat().st_size
        status, message = srv.call(rad, index, srv.event_data(rad, index, values),
                                   session_hash=session)  # fmt: skip
    text = html.unescape(srv.answer_text(message)) if message else ""
    refused = (status == 200 and expected in text) or (status in (400, 413, 422) and not text)
    grown = world["audit"].stat().st_size - size_before
    audit_text = world["audit"].read_text()
    clean = grown < 20_000 and "x" * 1000 not in audit_text and "NaN" not in audit_text
    alive = _load(rad, "1")[0] == 200
    cases.check(f"{what}: refused with a clear message", refused, f"{status} {text[:240]}")
    cases.check(f"{what}: the audit never carries it", clean, f"grew {grown} bytes")
    cases.check(f"{what}: the server answers afterwards", alive)
    assert refused and clean and alive


def test_a_request_body_beyond_16_mib_is_not_read(site, cases):
    """Any event body over 16 MiB (declared or streamed) ends with 413 or a closed request,
    never read into memory; the server answers the next action."""
    rad = srv.client(site["base"], "rad")
    declared = rad.post("gradio_api/queue/join", content=b"{" + b" " * (17 * 1024 * 1024) + b"}",
                        headers={"Content-Type": "application/json"})  # fmt: skip

    def chunks():  # no Content-Length: counted while it streams
        for _ in range(40):
            yield b" " * (1024 * 1024)

    try:
        streamed = rad.post("gradio_api/queue/join", content=chunks(),
                            headers={"Content-Type": "application/json"}).status_code  # fmt: skip
    except srv.httpx.HTTPError as exc:  # the server may close the connection instead
        streamed = type(exc).__name__
    alive = _load(rad, "1")[0] == 200
    cases.check("a declared 17 MiB event body: 413", declared.status_code == 413,
                str(declared.status_code))  # fmt: skip
    cases.check("a streamed 40 MiB event body: refused", streamed != 200, str(streamed))
    cases.check("the server answers afterwards", alive)
    assert declared.status_code == 413 and streamed != 200 and alive


@pytest.mark.parametrize("button", ["cur-save", "cur-publish", "cur-impact"])
def test_an_oversized_curation_text_is_refused_before_any_work(site, world, cases, button):
    """Finding 8 for the curation tab: a 10 MB edit sent to Save draft, Publish or Measure impact
    (as a curator, who may edit) is refused with the cap's message; nothing is written."""
    cur = srv.client(site["base"], "cur")
    key = srv.component_props(cur, "cur-set")["value"]
    before = sorted(p.name for p in world["anchors"].rglob("*") if p.is_file())
    data = {"cur-save": [key, BIG, ""], "cur-publish": [key, BIG, "", FINDING],
            "cur-impact": [key, BIG]}[button]  # fmt: skip
    status, message = srv.call(cur, srv.fn_index(cur, button, "click"), data)
    text = html.unescape(srv.answer_text(message)) if message else ""
    refused = status == 200 and "10,000,000 characters long; at most 100,000" in text
    unchanged = sorted(p.name for p in world["anchors"].rglob("*") if p.is_file()) == before
    cases.check(f"{button}: a 10 MB edit is refused with the cap", refused, text[:240])
    cases.check(f"{button}: nothing written", unchanged)
    assert refused and unchanged
