"""The Indiana University reports reader, on a synthetic archive in the same layout."""

from __future__ import annotations

import io
import tarfile

import pytest

from chexretrieve.anchors import AnchorSetError, iu_reports, save_new_version
from chexretrieve.anchors.iu_reports import (
    find_iu_reports_archive,
    iu_broad_anchor_set,
    iu_report_sentences,
    read_iu_reports,
)

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<eCitation><uId id="CXR{n}"/><MedlineCitation><Article><Abstract>
<AbstractText Label="COMPARISON">None.</AbstractText>
<AbstractText Label="INDICATION">Cough.</AbstractText>
<AbstractText Label="FINDINGS">{findings}</AbstractText>
<AbstractText Label="IMPRESSION">{impression}</AbstractText>
</Abstract></Article></MedlineCitation></eCitation>"""


def _archive(path, reports) -> None:
    with tarfile.open(path, "w:gz") as archive:
        folder = tarfile.TarInfo("ecgen-radiology")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        for n, (findings, impression) in reports.items():
            data = REPORT.format(n=n, findings=findings, impression=impression).encode()
            info = tarfile.TarInfo(f"ecgen-radiology/{n}.xml")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture
def archive(tmp_path):
    path = tmp_path / "reports.tgz"
    _archive(
        path,
        {
            10: (
                "Heart size is normal. The lungs are clear. No pleural effusion.",
                "Normal chest.",
            ),
            2: (
                "Small right pleural effusion. Stable XXXX opacity in the left base.",
                "Small right effusion. No pneumothorax.",
            ),
        },
    )
    return path


def test_reports_are_read_in_numeric_order_with_sections(archive) -> None:
    reports = read_iu_reports(archive)
    assert [r.report_id for r in reports] == ["2", "10"]
    assert reports[1].sections["IMPRESSION"] == "Normal chest."
    assert reports[0].sections["INDICATION"] == "Cough."


def test_sentences_are_split_deduplicated_and_redactions_dropped(archive) -> None:
    assert iu_report_sentences(archive) == [
        "Small right pleural effusion.",
        "Small right effusion.",
        "No pneumothorax.",
        "Heart size is normal.",
        "The lungs are clear.",
        "No pleural effusion.",
        "Normal chest.",
    ]
    with_redacted = iu_report_sentences(archive, keep_redacted=True, sections=("FINDINGS",))
    assert "Stable XXXX opacity in the left base." in with_redacted


def test_the_anchor_set_is_run_time_only(archive, tmp_path) -> None:
    anchor_set = iu_broad_anchor_set(archive)
    assert anchor_set.context == "broad/iu-reports" and len(anchor_set) == 7
    assert anchor_set.polarities[:3] == ("positive", "positive", "negative")
    with pytest.raises(AnchorSetError, match="licence forbids redistribution"):
        save_new_version(anchor_set, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_or_broken_archives_give_clear_errors(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("CHEXRETRIEVE_IU_REPORTS", raising=False)
    monkeypatch.setattr(iu_reports.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="pip install torchxrayvision"):
        find_iu_reports_archive()
    monkeypatch.setenv("CHEXRETRIEVE_IU_REPORTS", str(tmp_path / "nope.tgz"))
    with pytest.raises(ValueError, match="which is not a file"):
        find_iu_reports_archive()
    broken = tmp_path / "broken.tgz"
    broken.write_bytes(b"not a tar file")
    with pytest.raises(ValueError, match="cannot read the reports archive"):
        read_iu_reports(broken)
    bad_xml = tmp_path / "bad.tgz"
    with tarfile.open(bad_xml, "w:gz") as archive:
        info = tarfile.TarInfo("ecgen-radiology/1.xml")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"<a><b"))
    with pytest.raises(ValueError, match="1.xml is not valid XML"):
        read_iu_reports(bad_xml)
