"""The loader reports every problem with its file and line, and refuses invalid files."""

from __future__ import annotations

import json

import pytest
from anchors_testing import effusion_set, line_of, saved_effusion

from chexretrieve.anchors import (
    AnchorSetError,
    format_anchor_set,
    load_anchor_set,
    validate_anchor_file,
)
from chexretrieve.anchors.config import ValidationConfig


def _edit(path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _messages(path, severity="error", config=None) -> list[str]:
    report = validate_anchor_file(path, config)
    return [str(p) for p in report.problems if p.severity == severity]


def test_the_repository_example_validates_without_problems(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    report = validate_anchor_file(path, ValidationConfig(min_sentences_warning=1))
    assert report.ok and report.problems == () and report.anchor_set == effusion_set()


def test_an_in_place_edit_is_a_hash_mismatch_naming_file_and_line(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    _edit(path, "Small left pleural effusion.", "Small left pleural effusion, new.")
    [message] = _messages(path)
    assert message.startswith(f"{path}:{line_of(path, 'content_hash:')}: error: content_hash")
    assert "immutable" in message and "version 2" in message
    with pytest.raises(AnchorSetError, match="does not match the sentences"):
        load_anchor_set(path)


def test_duplicates_name_both_lines(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    # same sentence up to case, spacing and the final full stop
    _edit(path, '"No pleural effusion."', '"no  pleural effusion"')
    _edit(path, '"The costophrenic angles are sharp."', '"No pleural effusion."')
    errors = _messages(path)
    first, second = line_of(path, '"no  pleural effusion"'), line_of(path, '"No pleural effusion."')
    assert any(
        e.startswith(f"{path}:{second}: error: duplicate sentence (same as line {first})")
        for e in errors
    ), errors


def test_empty_over_long_and_control_characters(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    long_text = "Pleural effusion " * 20
    _edit(path, '"Small left pleural effusion."', '"   "')
    _edit(path, '"Large bilateral pleural effusions."', json.dumps(long_text.strip()))
    _edit(path, '"No pleural effusion."', '"No pleural\\teffusion."')
    errors = "\n".join(_messages(path))
    assert (
        f"{path}:{line_of(path, chr(34) + '   ' + chr(34))}: error: sentence 1 is empty" in errors
    )
    assert (
        f":{line_of(path, 'Pleural effusion Pleural')}: error: sentence 4 has 339 characters"
        in errors
    )
    assert (
        f":{line_of(path, 'pleural' + chr(92) + 'teffusion')}: error: sentence 5 contains" in errors
    )
    shorter = ValidationConfig(max_sentence_chars=20)
    assert any("limit 20" in m for m in _messages(path, config=shorter))


def test_unknown_finding_names_suggest_the_canonical_spelling(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    _edit(path, 'finding: "Pleural Effusion"', 'finding: "pleural effusion"')
    [message] = _messages(path)
    assert message.startswith(f"{path}:{line_of(path, 'finding:')}: error: unknown finding name")
    assert "write it as 'Pleural Effusion'" in message
    _edit(path, 'finding: "pleural effusion"', 'finding: "Lung Cancer"')
    assert "expected one of: Enlarged Cardiomediastinum" in _messages(path)[0]


def test_schema_errors_point_at_the_offending_line(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    _edit(path, "polarity: negative, source: main}", "polarity: unsure, source: main}")
    [message] = _messages(path)
    line = line_of(path, "polarity: unsure")
    assert message.startswith(f"{path}:{line}: error: schema: sentences/4/polarity: 'unsure'")
    path = saved_effusion(tmp_path / "b")
    _edit(path, "version: 1\n", "")
    assert "'version' is a required property" in _messages(path)[0]
    path = saved_effusion(tmp_path / "c")
    _edit(path, 'variant: "a"', 'variant: "a"\ncolour: "blue"')
    [message] = _messages(path)
    assert message.startswith(f"{path}:{line_of(path, 'colour')}: error: schema: top level:")
    assert "'colour' was unexpected" in message


def test_yaml_syntax_errors_and_repeated_keys_carry_lines(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    _edit(path, '  - {text: "No pleural effusion."', '  - {text: "No pleural effusion."]')
    [message] = _messages(path)
    assert message.startswith(f"{path}:") and "not valid YAML/JSON" in message
    assert f":{line_of(path, 'effusion.' + chr(34) + ']')}:" in message
    path = saved_effusion(tmp_path / "b")
    _edit(path, 'variant: "a"', 'variant: "a"\nvariant: "b"')
    messages = _messages(path)
    assert any(
        m.startswith(f"{path}:{line_of(path, 'variant: ' + chr(34) + 'b')}: error: key 'variant'")
        for m in messages
    ), messages


def test_json_files_get_line_numbers_too(tmp_path) -> None:
    data = effusion_set().to_dict()
    data["sentences"][2]["text"] = data["sentences"][0]["text"]
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data, indent=2))
    errors = _messages(path)
    text_lines = [i for i, t in enumerate(path.read_text().splitlines(), 1) if '"text"' in t]
    first, third = text_lines[0], text_lines[2]
    assert errors[0] == (
        f"{path}:{third}: error: duplicate sentence (same as line {first}): "
        "'Small left pleural effusion.'"
    )


def test_balance_and_size_warnings_do_not_block_loading(tmp_path) -> None:
    positives = [(f"Pleural effusion number {i}.", "positive") for i in range(12)]
    path = tmp_path / "set.yaml"
    path.write_text(format_anchor_set(effusion_set(sentences=positives)))
    warnings = _messages(path, "warning")
    assert warnings == [
        f"{path}:{line_of(path, 'sentences:')}: warning: all 12 sentences share one polarity"
    ]
    mostly = positives[:10] + [("No pleural effusion.", "negative")]
    path.write_text(format_anchor_set(effusion_set(sentences=mostly)))
    assert "91% of sentences are positive" in _messages(path, "warning")[0]
    assert load_anchor_set(path).polarities.count("negative") == 1


def test_unused_source_is_a_warning_and_unknown_source_an_error(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    _edit(path, "sources:\n", 'sources:\n  spare:\n    kind: "curated"\n')
    assert any("source 'spare' is not used" in w for w in _messages(path, "warning"))
    _edit(path, "polarity: negative, source: main}", "polarity: negative, source: ghost}")
    assert any("source 'ghost' is not defined" in e for e in _messages(path))


def test_unreadable_and_non_mapping_files(tmp_path) -> None:
    missing = tmp_path / "missing.yaml"
    assert "cannot read the file" in _messages(missing)[0]
    with pytest.raises(AnchorSetError, match="cannot read"):
        load_anchor_set(missing)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert _messages(listing) == [
        f"{listing}:1: error: the file must hold one mapping (id, version, sentences, ...); "
        "see the JSON Schema"
    ]


def test_several_bad_entries_keep_their_own_indices_and_lines(tmp_path) -> None:
    path = saved_effusion(tmp_path)
    moderate = '"Moderate right pleural effusion, increased from prior.", polarity: positive, '
    _edit(path, moderate, moderate + "extra: 1, ")
    _edit(path, "polarity: negative, source: main}", "polarity: 3, source: main}")
    errors = _messages(path)
    assert len(errors) == 2, errors
    assert errors[0].startswith(f"{path}:{line_of(path, 'extra: 1')}: error: schema: sentences/1:")
    assert errors[1].startswith(
        f"{path}:{line_of(path, 'polarity: 3')}: error: schema: sentences/4/polarity: 3"
    )
