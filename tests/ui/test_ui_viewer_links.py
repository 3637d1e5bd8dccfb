"""The "Open in viewer" links of a results page: one grant per page naming the query's and the
results' studies; an archived query opens beside each result, an uploaded image (no archived
study) leaves the result alone; each link opens exactly the studies it names."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from ui_fakes import make_service, write_png

from chexretrieve.ui.handlers import CaseLookup, SearchSettings
from chexretrieve.ui.viewer_links import links_maker
from chexretrieve.viewer_web.access import ViewerAccess

FINDING = "Pleural Effusion"


def _lookup(tmp_path):
    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32, case_page_size=10)
    access = ViewerAccess()
    lookup.viewer_links = links_maker(access)
    return lookup, access


def _links(html: str) -> dict[int, tuple[str, list[str]]]:
    import re

    found = {}
    for case, href in re.findall(r"data-case='(\d+)'.*?href='([^']+)'", html, flags=re.S):
        query = parse_qs(urlsplit(href.replace("&amp;", "&")).query)
        found.setdefault(int(case), (query["grant"][0], query["studies"][0].split(",")))
    return found


def test_an_archived_query_opens_beside_each_result(tmp_path):
    lookup, access = _lookup(tmp_path)
    query = lookup.load_case(5, user="dr.view")
    page = lookup.search(query, SearchSettings(FINDING, "softmax"), user="dr.view")
    links = _links(page.html)
    assert set(links) == set(page.image_ids)
    meta = lookup.gallery.metadata
    query_study = meta.loc[5, "study_uid"]
    grants = {grant for grant, _ in links.values()}
    assert len(grants) == 1  # one grant for the page
    for case, (grant, studies) in links.items():
        expected = [query_study, meta.loc[case, "study_uid"]]
        assert studies == (expected if expected[0] != expected[1] else expected[:1])
        session = access.open(grant, "dr.view", studies)
        assert all(access.allowed(session, "dr.view", s) for s in studies)
    assert page.html.count("Open in viewer") == 2 * len(page.image_ids)  # card and row


def test_an_uploaded_image_leaves_the_result_alone(tmp_path):
    lookup, _ = _lookup(tmp_path)
    path = tmp_path / "upload.png"
    write_png(path, seed=99)
    query = lookup.load_upload(str(path))
    page = lookup.search(query, SearchSettings(FINDING, "softmax"), user="dr.view")
    meta = lookup.gallery.metadata
    for case, (_, studies) in _links(page.html).items():
        assert studies == [meta.loc[case, "study_uid"]]


def test_without_the_viewer_there_is_no_link(tmp_path):
    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32, case_page_size=10)
    page = lookup.search(lookup.load_case(5), SearchSettings(FINDING, "softmax"))
    assert "Open in viewer" not in page.html and "cx-ohif" not in page.html


def test_the_compare_viewer_links_its_pair_to_ohif(tmp_path):
    from chexretrieve.ui.compare import CompareViewer

    lookup, access = _lookup(tmp_path)
    query = lookup.load_case(5, user="dr.view")
    page = lookup.search(query, SearchSettings(FINDING, "softmax"), user="dr.view")
    picked = page.image_ids[0]
    shown = CompareViewer(lookup, viewer_px=256).open(
        query, picked, SearchSettings(FINDING), user="dr.view"
    )
    ((grant, studies),) = _links(f"<x data-case='{picked}'>{shown.details_html}").values()
    meta = lookup.gallery.metadata
    assert studies[-1] == meta.loc[picked, "study_uid"] and "OHIF viewer" in shown.details_html
    access.open(grant, "dr.view", studies)  # a live grant for this user and pair


class _Book:
    def __init__(self, roles: dict) -> None:
        self.roles = roles

    def active_role(self, name):  # noqa: ANN001, ANN201
        return self.roles.get(name)


class _SignIn:
    def __init__(self, mode: str, roles: dict) -> None:
        self.mode = mode
        self.book = _Book(roles)


def test_phi_in_the_viewer_follows_the_accounts_role():
    """With accounts, only admins and radiologists see identifying headers in OHIF; a curator, a
    disabled account (no role) and an unknown name get de-identified ones; without accounts the
    operator at the machine sees them."""
    from chexretrieve.ui.viewer_links import user_sees_phi

    roles = {"rad": "radiologist", "adm": "admin", "cur": "curator"}
    for mode in ("accounts", "header"):
        sign_in = _SignIn(mode, roles)
        assert user_sees_phi("rad", sign_in) and user_sees_phi("adm", sign_in)
        assert not user_sees_phi("cur", sign_in)
        assert not user_sees_phi("gone", sign_in)
    assert user_sees_phi("anonymous@127.0.0.1", _SignIn("none", {}))
    assert user_sees_phi("anonymous@127.0.0.1", None)
