"""The committed reports match the checkout (issue 32): every manifest's provenance block is checked
against today's code, RENDER_VERSION, generator, encoder weights, anchor sets, prior and command
options; and the check itself fails for each kind of drift (an older RENDER_VERSION first)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from chexretrieve.evaluation import staleness as P
from chexretrieve.evaluation.code_version import (
    CODE_MODULES,
    EVALUATION_CODE_VERSION,
    REPO_ROOT,
    code_record,
    source_fingerprint,
)
from chexretrieve.phantom.config import RENDER_VERSION

MANIFESTS = P.committed_manifests()


def _name(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def test_the_committed_reports_are_found():
    names = {_name(p) for p in MANIFESTS}
    assert "eval/reports/density-phantom/manifest.json" in names
    assert "eval/phantom_zero_shot.manifest.json" in names
    assert "eval/reports/phantom-v4/manifest.json" in names  # over the three v4 runs
    # superseded folders (the retrieval reports made before the L/R-marker fix, or with one
    # encoder) are not vouched for; eval/reports/phantom-v4 is their successor
    assert not any("phantom-2026-" in n for n in names)
    assert all(
        (REPO_ROOT / "eval/reports" / folder / P.SUPERSEDED_MARKER).is_file()
        for folder in ("phantom-2026-11-29", "phantom-2026-12-01", "phantom-2026-12-02",
                       "phantom-2026-12-04")
    )  # fmt: skip


@pytest.mark.parametrize("manifest", MANIFESTS, ids=_name)
def test_every_committed_report_matches_the_checkout(manifest):
    reasons = P.stale_reasons(json.loads(manifest.read_text()))
    assert reasons == [], (
        f"{_name(manifest)} is stale: " + "; ".join(reasons) + ". Regenerate the committed reports "
        "with eval/regenerate_reports.sh --replace"
    )


#: the command of the retrieval manifest the drift tests edit
CURRENT_COMMAND = "chexretrieve eval retrieval --phantom-n 3000 --phantom-seed 0 --out x"


@pytest.fixture(scope="module")
def retrieval_manifest():
    """A retrieval manifest as `eval retrieval` writes it, made now from the checkout (the default
    encoder, world 0, the committed anchor sets and prior, the command's resolved options): the
    check must pass on it, and each edit below must make it fail."""
    from chexretrieve.encoders.phantom import DEFAULT_PHANTOM_WEIGHTS
    from chexretrieve.evaluation.provenance import file_sha256, report_provenance
    from chexretrieve.evaluation.sources import load_anchor_texts
    from chexretrieve.findings import FINDINGS

    texts = load_anchor_texts(None, tuple(FINDINGS), None)
    encoder_id = "phantom:" + file_sha256(DEFAULT_PHANTOM_WEIGHTS)[:12]
    block = report_provenance(
        "retrieval",
        encoders=[("phantom", encoder_id)],
        worlds=[0],
        texts=texts,
        anchors={"root": None, "findings": list(FINDINGS), "max_variants": None},
        options=P.resolve_options(CURRENT_COMMAND),
    )
    return {"command": CURRENT_COMMAND, "provenance": block}


def test_a_manifest_made_from_the_checkout_is_current(retrieval_manifest):
    assert P.stale_reasons(retrieval_manifest) == []


def _stale(manifest, edit) -> list[str]:
    changed = copy.deepcopy(manifest)
    edit(changed["provenance"])
    return P.stale_reasons(changed)


def test_a_report_made_with_an_older_render_version_is_stale(retrieval_manifest):
    def older(block):
        block["render_version"] = RENDER_VERSION - 1

    reasons = _stale(retrieval_manifest, older)
    assert any(f"RENDER_VERSION {RENDER_VERSION - 1}" in r for r in reasons), reasons


def test_the_old_density_report_would_be_stale():
    """The density report committed before issue 32 (no provenance, RENDER_VERSION 1 phantoms)."""
    old = {"command": "chexretrieve eval density --out eval/reports/density-phantom"}
    assert "no provenance block" in P.stale_reasons(old)[0]


EDITS = {
    "declared code version": (
        lambda b: b["code"].update(version=EVALUATION_CODE_VERSION - 1),
        "evaluation code version",
    ),
    "a module's code": (
        lambda b: b["code"]["modules"].update({"chexretrieve/metrics.py": "0" * 16}),
        "chexretrieve/metrics.py",
    ),
    "a module missing from the record": (
        lambda b: b["code"]["modules"].pop("chexretrieve/evaluation/scoring.py"),
        "chexretrieve/evaluation/scoring.py",
    ),
    "the generator": (
        lambda b: b["worlds"][0].update(generator_fingerprint="0" * 16),
        "generator fingerprint",
    ),
    "the encoder weights": (
        lambda b: b["encoders"][0].update(sha256="0" * 64),
        "not the weights the report used",
    ),
    "an anchor set": (
        lambda b: b["anchor_sets"][0].update(content_hash="sha256:" + "0" * 64),
        "anchor sets",
    ),
    "the prior": (lambda b: b["priors"][0].update(folder="private-anchors"), "prior"),
    "a prior set joining": (
        lambda b: b["priors"].append({"key": "broad_x@1", "content_hash": "x", "folder": "x"}),
        "prior",
    ),
    "an option's default": (lambda b: b["options"].update(min_queries=5), "min_queries"),
    "the schema": (lambda b: b.update(schema=0), "schema"),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_each_kind_of_drift_makes_a_report_stale(what, retrieval_manifest):
    edit, expected = EDITS[what]
    reasons = _stale(retrieval_manifest, edit)
    assert any(expected in r for r in reasons), reasons


def test_a_command_todays_cli_rejects_is_stale(retrieval_manifest):
    changed = copy.deepcopy(retrieval_manifest)
    changed["command"] += " --no-such-option 3"
    assert any("today's CLI rejects" in r for r in P.stale_reasons(changed))


def test_options_resolve_to_what_the_command_recorded():
    options = P.resolve_options("chexretrieve eval retrieval --phantom-n 30 --out x --quiet")
    assert options["phantom_n"] == 30 and "out" not in options and "quiet" not in options
    # Table 4 (runtime) is opt-in: the default experiments leave it out
    assert "runtime" not in options["experiments"].split(",")


def test_code_fingerprints_ignore_comments_formatting_and_docstrings():
    code = 'def f(x):\n    """Doc."""\n    return x + 1\n'
    same = "def f(x):  # a comment\n\n    return (x +\n            1)\n"
    other = "def f(x):\n    return x + 2\n"
    assert source_fingerprint(code) == source_fingerprint(same)
    assert source_fingerprint(code) != source_fingerprint(other)


def test_an_unrelated_commit_leaves_the_reports_current(tmp_path):
    """Only the modules a report's numbers depend on are hashed: an edit of the UI or a comment in
    the geometry changes nothing; a change to what the geometry computes does."""
    shutil.copytree(REPO_ROOT / "chexretrieve", tmp_path / "chexretrieve")
    before = code_record("retrieval", tmp_path)
    ui = tmp_path / "chexretrieve/ui/handlers.py"
    ui.write_text(ui.read_text() + "\nUNRELATED = 1\n")
    metrics = tmp_path / "chexretrieve/metrics.py"
    metrics.write_text(metrics.read_text() + "\n# a comment\n")
    assert code_record("retrieval", tmp_path) == before
    metrics.write_text(metrics.read_text() + "\nNEW_CONSTANT = 2\n")
    assert code_record("retrieval", tmp_path) != before
    assert all("chexretrieve/ui" not in m for m in CODE_MODULES["retrieval"])
