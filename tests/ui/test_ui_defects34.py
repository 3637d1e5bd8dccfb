"""Issue 34's defects that plain Python shows (the on-screen ones are in
test_ui_browser_defects34.py): the typicality line in plain words (item 4), a publish after a
measured harm waits for the curator's confirmation, a revert says what it restores, one minus
sign in the impact table (item 8), an upload named by its file (item 10)."""

from __future__ import annotations

import re
import shutil
from html import unescape
from pathlib import Path
from types import SimpleNamespace

import pytest
from ui_fakes import make_service, write_png

from chexretrieve.ui.curation import DraftDesk, NeedsConfirmation, set_as_text
from chexretrieve.ui.density_banner import density_banner_html

REPO_ANCHORS = Path(__file__).resolve().parents[2] / "anchors"
FINDING = "Pleural Effusion"


def _density(ood: bool, percentile: float):
    from chexretrieve.density.archive import ComponentName
    from chexretrieve.density.provider import ConceptShare, QueryDensity

    name = ComponentName(11, 0.2, ("Pleural Effusion: small effusion",), ("Pleural Effusion",), 9)
    return QueryDensity(
        log_density=198.2, percentile=percentile, threshold=150.0, ood_percentile=0.5, ood=ood,
        stale=False, revision=4, n_images=3000, n_components=64,
        concepts=(ConceptShare(11, 0.62, name),),
    )  # fmt: skip


def _visible_text(html: str) -> str:
    """The text a person reads (tags and attributes, such as the hover title, removed)."""
    return re.sub(r"<[^>]+>", "", html)


@pytest.mark.parametrize("ood", [False, True])
def test_the_typicality_line_is_in_plain_words(ood):
    html = density_banner_html(_density(ood, 0.0 if ood else 18.3))
    text = _visible_text(html)
    for jargon in ("log-density", "component", "flagged below", "percentile 18.3"):
        assert jargon not in text, jargon
    if ood:
        assert "0.0 % of archived images are less typical of the archive than this query" in text
    else:
        assert "18.3 % of archived images are less typical of the archive than this query" in text
        assert "and this one is not" in text  # the threshold is not read as this query's flag
        # the cluster, not a share: the mixture's posterior is a hard assignment (issue 32)
        assert "cluster of cases mostly labelled Pleural Effusion." in unescape(text)
    assert "log-density 198.2" in html  # the figures stay, in the hover text


@pytest.fixture
def desk(tmp_path):
    root = tmp_path / "anchors"
    shutil.copytree(
        REPO_ANCHORS / "findings" / "pleural_effusion", root / "findings" / "pleural_effusion"
    )
    service = make_service(tmp_path)
    return DraftDesk(root, None, service.encoder, lambda: service.gallery)


def test_publishing_an_edit_measured_to_hurt_needs_a_confirmation(desk):
    base = desk.get("pleural_effusion.a@1")
    edit = set_as_text(base) + "\n+ Small layering left pleural effusion."
    _, revised = desk.edited(base.key, edit)
    harm = SimpleNamespace(auprc_before=0.423, auprc_after=0.406, delta=-0.017,
                           delta_low=-0.027, delta_high=-0.009)  # fmt: skip
    desk.remember_hurt(base.key, revised, harm)  # what a measured impact that hurts records
    with pytest.raises(NeedsConfirmation) as asked:
        desk.publish(base.key, edit, "", "curator")
    text = str(asked.value)
    assert "measurably hurts" in text and "Publish anyway" in text
    assert "0.423 → 0.406" in text and "−0.027 to −0.009" in text
    assert not (desk.anchors_dir / "findings" / "pleural_effusion" / "v2-a.yaml").exists()
    saved = desk.publish(base.key, edit, "", "curator", confirmed=True)
    assert saved.key == "pleural_effusion.a@2"


def test_a_measured_impact_that_hurts_is_remembered_for_publish(desk, monkeypatch):
    import chexretrieve.anchors.curation as curation

    base = desk.get("pleural_effusion.a@1")
    edit = "\n".join(set_as_text(base).splitlines()[::2])
    real = curation.measure_impact

    def hurting(*args, **kwargs):
        report = real(*args, **kwargs)
        return type(report)(**{**report.__dict__, "auprc_after": report.auprc_before - 0.02,
                               "delta_low": -0.03, "delta_high": -0.01})  # fmt: skip

    monkeypatch.setattr(curation, "measure_impact", hurting)
    impact = desk.draft_impact(base.key, edit)
    assert "measurably hurts" in impact
    with pytest.raises(NeedsConfirmation):
        desk.publish(base.key, edit, "", "curator")


def test_the_impact_table_uses_one_minus_sign(desk):
    base = desk.get("pleural_effusion.a@1")
    impact = desk.draft_impact(base.key, "\n".join(set_as_text(base).splitlines()[::2]))
    table = [line for line in impact.splitlines() if line.startswith("| change") or
             line.startswith("| 95 % interval")]  # fmt: skip
    assert len(table) == 2
    for line in table:
        assert not re.search(r"-\d", line), line  # never a hyphen before a number
    assert re.search(r"[+−]\d\.\d{4} to [+−]\d\.\d{4}", table[1])


def test_a_revert_says_which_version_it_restores(desk):
    base = desk.get("pleural_effusion.a@1")
    desk.publish(base.key, set_as_text(base) + "\n- No effusion on the right.", "", "curator")
    back = desk.revert("pleural_effusion.a@1", "curator")
    assert back.key == "pleural_effusion.a@3"
    assert "restores the sentences of pleural_effusion.a@1" in back.summary
    assert "pleural_effusion.a@2" in back.summary  # what it replaces (kept in the history)


def test_an_upload_is_named_by_its_file(tmp_path):
    from chexretrieve.ui.handlers import CaseLookup

    lookup = CaseLookup(make_service(tmp_path), thumbnail_px=32, case_page_size=10)
    path = tmp_path / "chest-pa-2024.png"
    write_png(path, seed=3)
    query = lookup.load_upload(str(path))
    assert query.name == "upload chest-pa-2024.png"
    assert "Query: upload chest-pa-2024.png" in lookup.query_details(query)
    long = tmp_path / ("x" * 200 + ".png")
    write_png(long, seed=5)
    name = lookup.load_upload(str(long)).name
    assert len(name) < 80 and name.endswith(".png") and "…" in name
