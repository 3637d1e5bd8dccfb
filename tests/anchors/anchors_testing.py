"""Helpers shared by the anchor-set tests: small sets and file writers."""

from __future__ import annotations

from pathlib import Path

from chexretrieve.anchors import AnchorSet, AnchorSource, save_new_version

SOURCE = AnchorSource(kind="curated", date="2026-11-29", note="test fixture")

EFFUSION = (
    ("Small left pleural effusion.", "positive"),
    ("Moderate right pleural effusion, increased from prior.", "positive"),
    ("Blunting of the right costophrenic angle.", "positive"),
    ("Large bilateral pleural effusions.", "positive"),
    ("No pleural effusion.", "negative"),
    ("The costophrenic angles are sharp.", "negative"),
)


def effusion_set(variant: str = "a", sentences=EFFUSION, version: int = 1) -> AnchorSet:
    return AnchorSet.create(
        sentences=sentences,
        source=SOURCE,
        finding="Pleural Effusion",
        variant=variant,
        version=version,
        created="2026-11-29",
        description="test set",
    )


def saved_effusion(root: Path, variant: str = "a") -> Path:
    return save_new_version(effusion_set(variant), root)


def line_of(path: Path, needle: str) -> int:
    """1-based line number of the first line containing needle."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def import_store_reports(url: str, private: Path, name: str) -> str:
    """Run ``chexretrieve anchors import-reports --db URL --name NAME`` with ``private`` as the
    private anchors folder; its output (AssertionError when it fails)."""
    import pytest
    from typer.testing import CliRunner

    from chexretrieve.cli import app

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHEXRETRIEVE_PRIVATE_ANCHORS", str(private))
        done = CliRunner().invoke(app, ["anchors", "import-reports", "--db", url, "--name", name])
    assert done.exit_code == 0, done.output
    return done.output
