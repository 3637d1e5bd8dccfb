"""One error style for the command line, and a query image's refusal in its own words
(issue 24, defect 11)."""

from __future__ import annotations

from typer.testing import CliRunner

from chexretrieve.cli import app


def test_a_bad_option_is_one_error_line_not_a_box() -> None:
    result = CliRunner().invoke(app, ["search", "--finding", "Edema"])
    assert result.exit_code == 2
    assert result.output.startswith("error: Invalid value: give exactly one of --case ID")
    assert "╭" not in result.output and "Usage:" not in result.output
    assert "search --help" in result.output
    result = CliRunner().invoke(app, ["search", "--case", "1", "--top-k", "many"])
    assert result.exit_code == 2 and result.output.startswith("error: Invalid value for '--top-k'")


def test_search_by_a_text_file_says_what_is_wrong_with_the_query_image(tmp_path, monkeypatch):
    from chexretrieve.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.close()
    notes = tmp_path / "notes.txt"
    notes.write_text("meeting notes\n", encoding="utf-8")
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.setenv("CHEXRETRIEVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    result = CliRunner().invoke(
        app,
        ["search", "--db", f"sqlite:///{tmp_path / 'store.sqlite'}", "--encoder", "stand-in:0:32",
         "--image", str(notes), "--finding", "Edema"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: The query image 'notes.txt' is not a DICOM, PNG or JPEG image")
    assert "give --image a DICOM, PNG or JPEG chest radiograph" in text
    assert "archive" not in text and "ingest" not in text


def test_the_ui_launches_quietly_without_gradios_share_advice(monkeypatch) -> None:
    from chexretrieve.ui.app import launch_app
    from chexretrieve.ui.config import UIConfig

    seen = {}

    class FakeBlocks:
        def queue(self, **kwargs):
            return self

        def launch(self, **kwargs):
            seen.update(kwargs)

    launch_app(FakeBlocks(), UIConfig(), block=True)
    assert seen["quiet"] is True and seen["share"] is False
