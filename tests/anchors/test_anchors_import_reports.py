"""`anchors import-reports` (scrub, split, deduplicate, write privately) and the one prior rule."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from typer.testing import CliRunner

from chexretrieve.anchors import AnchorSet, AnchorSource, load_anchor_set, save_new_version
from chexretrieve.anchors.broad_prior import broad_prior_sets, prior_sentences
from chexretrieve.anchors.import_reports import REPOSITORY
from chexretrieve.anchors.report_corpus import (
    corpus_sentences,
    is_content_free,
    report_sentences,
    scrub,
)
from chexretrieve.cli import app
from chexretrieve.evaluation.sources import load_anchor_texts
from chexretrieve.search.sources import StoreAnchorProvider
from chexretrieve.store import open_store

runner = CliRunner()

REPORT_A = """                                 FINAL REPORT
 EXAMINATION:  CHEST (PA AND LAT)

 INDICATION:  78-year-old woman with cough, MRN 4417723.

 COMPARISON:  Chest radiograph from 03/14/2021.

 FINDINGS:

 1. Small right pleural effusion. No pneumothorax.
 2. A 5 mm nodule in the left upper lobe.

 IMPRESSION:

 Small right pleural effusion.  Dr. Patel was paged at 8:15 pm on Jan 3, 2022.
"""
REPORT_B = """ FINDINGS:  No pneumothorax. Right 12 French chest tube, call 617-555-0199.

 IMPRESSION:  Moderate pulmonary edema, worse since 2 days.
"""


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("Dr. Patel was paged at 8:15 pm on 12/03/2021.", "Dr. ___ was paged at ___ on ___."),
        ("Seen by Mrs. Jones on Jan 3, 2022.", "Seen by Mrs. ___ on ___."),
        ("Compared with 3 December 2019.", "Compared with ___."),
        ("A 5 mm nodule and a 2.3 x 1.2 cm mass.", "A 5 mm nodule and a 2.3 x 1.2 cm mass."),
        ("A 78-year-old, MRN 4417723, call 617-555-0199.", "A ___-year-old, MRN ___, call ___."),
        ("Right 12 French tube; 30% collapse.", "Right 12 French tube; 30% collapse."),
        ("Old fractures of the 6th and 7th ribs.", "Old fractures of the 6th and 7th ribs."),
        ("Worse since 2 days.", "Worse since ___ days."),
    ],
)
def test_scrub_replaces_dates_names_and_numbers_with_blanks(text, scrubbed):
    assert scrub(text) == scrubbed


def test_sentences_come_from_findings_and_impression_deduplicated():
    assert report_sentences(REPORT_A) == [
        "Small right pleural effusion.",
        "No pneumothorax.",
        "A 5 mm nodule in the left upper lobe.",
        "Small right pleural effusion.",
        "Dr. ___ was paged at ___ on ___.",
    ]
    assert corpus_sentences([REPORT_A, REPORT_B]) == [
        "Small right pleural effusion.",
        "No pneumothorax.",
        "A 5 mm nodule in the left upper lobe.",
        "Dr. ___ was paged at ___ on ___.",
        "Right 12 French chest tube, call ___.",
        "Moderate pulmonary edema, worse since ___ days.",
    ]


def test_import_from_a_folder_writes_privately_and_never_into_the_repository(tmp_path, monkeypatch):
    reports = tmp_path / "files" / "p10" / "p10000032"
    reports.mkdir(parents=True)
    (reports / "s50414267.txt").write_text(REPORT_A)
    (reports / "s53189527.txt").write_text(REPORT_B)
    private = tmp_path / "private"
    monkeypatch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(private))
    args = ["anchors", "import-reports", "--folder", str(tmp_path / "files"), "--name", "test"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "broad.reports-test@1: 6 sentences from 2 reports" in result.output
    assert "never commit" in result.output and "only where named: --prior" in result.output
    written = load_anchor_set(private / "broad" / "reports-test-v1.yaml")
    assert written.context == "broad/reports-test" and len(written) == 6
    recorded = written.sources["reports"].parameters
    assert recorded["no_redistribution"] is True and "MIMIC" in recorded["licence"]
    assert recorded["scrubber"].startswith("chexretrieve.anchors.phi_scrub rules 1 + philter-lite")
    assert "store" not in recorded  # a folder import joins a prior only where named
    assert (private / ".gitignore").read_text().splitlines()[-1] == "*"
    again = runner.invoke(app, args)
    assert "unchanged" in again.output and not (private / "broad/reports-test-v2.yaml").exists()
    in_repository = REPOSITORY / "private-anchors-test"
    inside = runner.invoke(app, [*args, "--out", str(in_repository)])
    assert inside.exit_code == 2 and "must never be committed" in " ".join(inside.output.split())
    assert not in_repository.exists()
    elsewhere = runner.invoke(app, [*args, "--out", str(tmp_path / "shared")])
    assert elsewhere.exit_code == 2 and "never leaves it" in " ".join(elsewhere.output.split())
    assert not (tmp_path / "shared").exists()
    shared = runner.invoke(app, [*args, "--out", str(tmp_path / "shared"), "--redistributable"])
    assert shared.exit_code == 0 and (tmp_path / "shared/broad/reports-test-v1.yaml").is_file()


def test_import_from_the_store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    with open_store(url) as store:
        store.put_reports({"50414267": (REPORT_A, "a.txt"), "53189527": (REPORT_B, "b.txt")})
        identity = store.identity
    monkeypatch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(tmp_path / "private"))
    result = runner.invoke(app, ["anchors", "import-reports", "--db", url])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "broad.reports-mimic@1: 6 sentences from 2 reports" in text
    assert f"prior of search, serve, the UI and eval on the store {identity} now includes" in text
    written = load_anchor_set(tmp_path / "private" / "broad" / "reports-mimic-v1.yaml")
    assert written.sources["reports"].parameters["store"] == identity
    empty = f"sqlite:///{tmp_path / 'e.sqlite'}"
    open_store(empty).close()
    refused = runner.invoke(app, ["anchors", "import-reports", "--db", empty])
    assert refused.exit_code == 2 and "holds no reports" in " ".join(refused.output.split())


def _save(root, context, sentences, restricted=False):
    source = AnchorSource(kind="curated", parameters={"no_redistribution": restricted})
    anchor_set = AnchorSet.create(
        sentences=[(s, "positive") for s in sentences], source=source, context=context
    )
    return save_new_version(anchor_set, root, allow_restricted=restricted)


class HashEncoder:
    """Text vectors from a hash of the text (what matters: the same text, the same vector)."""

    encoder_id = "hash:4"
    embed_dim = 4
    inv_temperature = 10.0

    def embed_texts(self, texts):
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], np.uint32) for t in texts]
        out = np.asarray(rows, dtype=np.float64) + 1.0
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def test_one_prior_rule_for_search_and_evaluation(tmp_path, monkeypatch):
    root, private = tmp_path / "anchors", tmp_path / "private"
    _save(root, "broad/zzz", ["Zeta sentence.", "Shared sentence."])
    _save(root, "broad/clinical", ["Clinical one.", "Shared sentence."])
    _save(private, "broad/reports-mimic", ["Report sentence.", "Clinical one."], restricted=True)
    sets = broad_prior_sets(root, private, named=["broad.reports-mimic"])
    assert [s.context for s in sets] == ["broad/clinical", "broad/reports-mimic", "broad/zzz"]
    expected = ("Clinical one.", "Shared sentence.", "Report sentence.", "Zeta sentence.")
    assert prior_sentences(sets) == expected
    # evaluation and search take the same sentences, in the same order
    monkeypatch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(private))
    texts = load_anchor_texts(root, findings=(), prior=["broad.reports-mimic@1"])
    assert texts.broad == expected
    assert "broad.reports-mimic@1" in texts.provenance
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        encoder = HashEncoder()
        store.register_encoder(encoder.encoder_id, 4, 10.0)
        provider = StoreAnchorProvider(store, encoder, root, prior=["broad.reports-mimic@1"])
        _, matrix = provider.broad_prior()
    np.testing.assert_array_equal(matrix, encoder.embed_texts(list(expected)))
    # without the private folder, only the anchors folder's sets
    assert prior_sentences(broad_prior_sets(root, tmp_path / "none")) == (
        "Clinical one.", "Shared sentence.", "Zeta sentence.",
    )  # fmt: skip


CONTENT_FREE = (
    "As above.", "No change.", "See above.", "Otherwise unchanged.", "No new findings.",
    "No significant interval change.", "Findings as described above.",
    "Compared with the prior study of ___.", "Unchanged since the previous examination.",
)  # fmt: skip
WITH_CONTENT = (
    "Stable cardiomegaly.", "No pneumothorax.", "No acute cardiopulmonary process.",
    "Heart size unchanged.", "Unremarkable study.", "Lines and tubes as above.",
)  # fmt: skip


def test_content_free_sentences_are_dropped_not_marked_positive():
    report = "FINDINGS: " + " ".join(CONTENT_FREE + WITH_CONTENT)
    assert report_sentences(report) == list(WITH_CONTENT)
    assert corpus_sentences(CONTENT_FREE) == []
    assert all(is_content_free(s) for s in CONTENT_FREE)
    assert not any(is_content_free(s) for s in WITH_CONTENT)
