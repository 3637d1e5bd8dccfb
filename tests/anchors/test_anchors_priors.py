"""Priors explicit (issue 32 item 2) and private sets visible (issue 34 item 15).

A private corpus imported from store A joins the posterior prior of searches and evaluations on
A, or where it is named (``--prior``), never silently on store B; the prior is named by key,
content hash and folder in ``search --json``, the search table, the eval manifest and the UI
legend. The content hashes are checked against the YAML files read with PyYAML and hashed here
(the documented canonical form), not against the project's loader.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from anchors_testing import import_store_reports
from PIL import Image
from typer.testing import CliRunner

from chexretrieve.anchors.broad_prior import resolve_prior
from chexretrieve.cli import app
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.evaluation.sources import load_anchor_texts
from chexretrieve.ingest import IngestConfig, ingest_paths
from chexretrieve.store import open_store

REPO = Path(__file__).resolve().parents[2]
ENCODER = "stand-in:0:32"
REPORTS = {
    "s1": ("FINDINGS: Small right pleural effusion. Patchy left basilar opacity.", "s1.txt"),
    "s2": ("FINDINGS: Moderate cardiomegaly with vascular congestion. No pneumothorax.", "s2.txt"),
}
runner = CliRunner()


def _archive(root: Path, seed: int) -> str:
    rng = np.random.default_rng(seed)
    root.mkdir()
    for i in range(10):
        Image.fromarray((rng.random((64, 64)) * 255).astype(np.uint8)).save(root / f"c{i}.png")
    url = f"sqlite:///{root / 'store.sqlite'}"
    with open_store(url) as store:
        ingest_paths([root], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    return url


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Stores A (with two reports, imported into the private folder) and B (no reports)."""
    base = tmp_path_factory.mktemp("priors")
    a, b = _archive(base / "a", 0), _archive(base / "b", 1)
    with open_store(a) as store:
        store.put_reports(REPORTS)
    private = base / "private"
    import_store_reports(a, private, "own")
    return {"a": a, "b": b, "private": private, "base": base}


@pytest.fixture
def env(stores, monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(stores["private"]))
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(stores["base"] / "audit.jsonl"))
    monkeypatch.delenv("CHEXRETRIEVE_DB", raising=False)
    return stores


def _file_hash(path: Path) -> str:
    """sha256 of ``[[polarity, text], ...]`` as compact JSON, from the YAML file itself."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    pairs = [[entry["polarity"], entry["text"]] for entry in data["sentences"]]
    text = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _identity(url: str) -> str:
    with open_store(url) as store:
        return store.identity


def test_a_private_set_joins_only_the_prior_of_its_own_store(env):
    own = resolve_prior(store=_identity(env["a"]))
    assert own.keys == ("broad.clinical@1", "broad.reports-own@1") and own.left_out == ()
    other = resolve_prior(store=_identity(env["b"]))
    assert other.keys == ("broad.clinical@1",)
    assert other.left_out == (("broad.reports-own@1", f"from the store {_identity(env['a'])}"),)
    assert resolve_prior(store=None).keys == ("broad.clinical@1",)
    named = resolve_prior(store=_identity(env["b"]), named=["broad.reports-own"])
    assert named.keys == own.keys and named.fingerprint == own.fingerprint
    with pytest.raises(ValueError, match="--prior broad.reports-nope@1: no such broad set"):
        resolve_prior(named=["broad.reports-nope@1"])
    # the evaluation's loader follows the same rule
    b_texts = load_anchor_texts(findings=(), store=_identity(env["b"]))
    a_texts = load_anchor_texts(findings=(), store=_identity(env["a"]))
    assert "Moderate cardiomegaly with vascular congestion." in a_texts.broad
    assert "Moderate cardiomegaly with vascular congestion." not in b_texts.broad
    assert b_texts.broad == load_anchor_texts(findings=(), store=None).broad


def _search(url: str, *extra: str):
    args = ["search", "--db", url, "--encoder", ENCODER, "--case", "3", "--finding", "Edema"]
    return runner.invoke(app, [*args, "--geometry", "gaussian_posterior", *extra])


def test_search_json_and_table_name_the_prior_by_key_hash_and_folder(env):
    done = _search(env["a"], "--json")
    assert done.exit_code == 0, done.output
    prior = json.loads(done.stdout)["prior"]
    clinical = REPO / "anchors" / "broad" / "clinical-v1.yaml"
    private = env["private"] / "broad" / "reports-own-v1.yaml"
    assert [(p["key"], p["content_hash"], Path(p["folder"]), p["private"]) for p in prior] == [
        ("broad.clinical@1", _file_hash(clinical), clinical.parent, False),
        ("broad.reports-own@1", _file_hash(private), private.parent, True),
    ]
    on_b = json.loads(_search(env["b"], "--json").stdout)["prior"]
    assert [p["key"] for p in on_b] == ["broad.clinical@1"]
    named = _search(env["b"], "--json", "--prior", "broad.reports-own@1")
    assert [p["key"] for p in json.loads(named.stdout)["prior"]] == [p["key"] for p in prior]
    table = " ".join(_search(env["b"]).output.split())
    assert f"prior: broad.clinical@1 ({_file_hash(clinical)[:15]}, {clinical.parent})" in table
    plain = runner.invoke(
        app, ["search", "--db", env["b"], "--encoder", ENCODER, "--case", "3", "--finding",
              "Edema", "--json"],
    )  # fmt: skip
    assert json.loads(plain.stdout)["prior"] == []  # no posterior geometry, no prior


def test_anchors_list_show_and_embed_see_private_sets(env):
    listed = runner.invoke(app, ["anchors", "list"])
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if line.startswith("broad.reports-own"))
    assert row.split("\t")[-1] == f"private: {env['private'] / 'broad' / 'reports-own-v1.yaml'}"
    shown = runner.invoke(app, ["anchors", "show", "broad.reports-own@1"])
    assert shown.exit_code == 0 and "Moderate cardiomegaly" in shown.output
    embed = runner.invoke(
        app, ["anchors", "embed", "broad.reports-own@1", "--db", env["a"], "--encoder", ENCODER]
    )
    assert embed.exit_code == 0, embed.output
    assert "broad.reports-own@1" in embed.output and "stored" in embed.output
    with open_store(env["a"]) as store:
        stored = store.anchor_embeddings_frame()
    assert "broad.reports-own" in set(stored["anchor_set_id"])
    missing = runner.invoke(app, ["anchors", "show", "broad.reports-nope@1"])
    assert missing.exit_code == 2 and "private anchor sets: broad.reports-own@1" in " ".join(
        missing.output.split()
    )


def test_an_import_on_another_store_leaves_this_evaluations_prior_as_it_was(tmp_path, monkeypatch):
    """The same eval command on store B (or the phantom world: no store) takes the same prior
    sentences, fingerprint and manifest entry before and after reports are imported from A."""
    monkeypatch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(tmp_path / "private"))
    a, b = _archive(tmp_path / "a", 2), _archive(tmp_path / "b", 3)
    with open_store(a) as store:
        store.put_reports(REPORTS)
    where = {"store B": _identity(b), "no store": None, "store A": _identity(a)}
    before = {name: load_anchor_texts(findings=(), store=s) for name, s in where.items()}
    import_store_reports(a, tmp_path / "private", "own")
    after = {name: load_anchor_texts(findings=(), store=s) for name, s in where.items()}
    for name in ("store B", "no store"):
        assert after[name].broad == before[name].broad
        assert after[name].prior_fingerprint == before[name].prior_fingerprint
        assert after[name].prior == before[name].prior
        assert after[name].prior_left_out == (
            ("broad.reports-own@1", f"from the store {where['store A']}"),
        )
    assert after["store A"].prior_fingerprint != before["store A"].prior_fingerprint
    assert len(after["store A"].broad) == len(before["store A"].broad) + 4
