"""Anchor-set files: load with validation (problems carry file and line), write, find, version.

Files are YAML (or JSON, which the same parser reads, so JSON files get line numbers too). One file
holds one released version; :func:`save_new_version` never overwrites a file, and the loader
refuses a file whose sentences no longer match its stored ``content_hash`` (an in-place edit).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from chexretrieve.anchors.anchor_set import (
    AnchorSentence,
    AnchorSet,
    AnchorSetError,
    AnchorSource,
    anchors_root,
    content_hash,
    context_id,
)
from chexretrieve.anchors.config import ValidationConfig
from chexretrieve.findings import FINDINGS, canonical_finding, finding_slug

log = logging.getLogger(__name__)

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "anchors" / "schema" / "anchor-set.schema.json"
_SUFFIXES = (".yaml", ".yml", ".json")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Problem:
    """One finding of the validator, printable as ``file:line: severity: message``."""

    path: str
    line: int | None
    severity: str  # "error" or "warning"
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.severity}: {self.message}"


@dataclass(frozen=True)
class ValidationReport:
    path: Path
    problems: tuple[Problem, ...]
    anchor_set: AnchorSet | None

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "warning")

    @property
    def ok(self) -> bool:
        return not self.errors


class _Loader(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):  # type: ignore[misc]
    """Safe YAML loader that keeps dates as plain strings (the schema checks their form)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@functools.cache
def _schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _plain_entry(entry: Any) -> bool:
    return (
        type(entry) is dict
        and entry.keys() == {"text", "polarity", "source"}
        and type(entry["text"]) is str
        and type(entry["source"]) is str
        and entry["polarity"] in ("positive", "negative")
    )


def _schema_errors(data: dict) -> list:
    """JSON-Schema errors, sorted by path. Sentence entries that plainly match the schema's item
    shape are not re-checked one by one (a 2,000-sentence file validates in a tenth of the time);
    the others go through the schema, and their error paths keep the original indices."""
    sentences = data.get("sentences")
    if not isinstance(sentences, list) or not sentences:
        checked, index_of = data, None
    else:
        odd = [i for i, entry in enumerate(sentences) if not _plain_entry(entry)]
        index_of = odd or [0]
        checked = {**data, "sentences": [sentences[i] for i in index_of]}
    errors = list(_schema_validator().iter_errors(checked))
    if index_of is not None:
        for error in errors:  # top-level errors: absolute_path is this same deque
            path = error.path
            if len(path) >= 2 and path[0] == "sentences" and isinstance(path[1], int):
                path[1] = index_of[path[1]]
    return sorted(
        errors, key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in e.path]
    )


def _line_map(node: yaml.Node, path: tuple = (), out: dict | None = None, dups: list | None = None):
    """Map every data path (keys / indices) to its 1-based line; collect duplicate mapping keys."""
    out = {} if out is None else out
    dups = [] if dups is None else dups
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                dups.append((path + (key,), line, seen[key]))
            seen[key] = line
            _line_map(value_node, path + (key,), out, dups)
            out[path + (key,)] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, path + (index,), out, dups)
    return out, dups


def _nearest_line(lines: dict[tuple, int], path: tuple) -> int | None:
    path = tuple(path)
    while path not in lines and path:
        path = path[:-1]
    return lines.get(path)


def _normalise(text: str) -> str:
    """Duplicate key: case, inner whitespace and final punctuation do not make a new sentence."""
    return re.sub(r"\s+", " ", text).strip().rstrip(".!;").casefold()


def parse_anchor_text(
    text: str, path: str | Path = "<text>", config: ValidationConfig | None = None
) -> ValidationReport:
    """Validate the text of one anchor-set file; never raises for bad content (see the report)."""
    config = config or ValidationConfig()
    where = str(path)
    problems: list[Problem] = []

    def add(line: int | None, message: str, severity: str = "error") -> None:
        problems.append(Problem(where, line, severity, message))

    def report(anchor_set: AnchorSet | None = None) -> ValidationReport:
        return ValidationReport(Path(path), tuple(problems), anchor_set)

    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        add(mark.line + 1 if mark else None, f"not valid YAML/JSON: {exc.problem or exc}")
        return report()
    except yaml.YAMLError as exc:
        add(None, f"not valid YAML/JSON: {exc}")
        return report()
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        add(1, "the file must hold one mapping (id, version, sentences, ...); see the JSON Schema")
        return report()
    lines, dups = _line_map(node)
    for dup_path, line, first in dups:
        add(line, f"key {dup_path[-1]!r} repeated (first at line {first}); keep one")

    for error in _schema_errors(data):
        path_in_data = tuple(error.absolute_path)
        location = "/".join(str(p) for p in path_in_data) or "top level"
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
            path_in_data += tuple(extra[:1])
        add(_nearest_line(lines, path_in_data), f"schema: {location}: {error.message}")
    if problems:
        return report()

    finding = data.get("finding")
    if finding is not None and finding not in FINDINGS:
        try:
            hint = f"; write it as {canonical_finding(finding)!r}"
        except ValueError:
            hint = f"; expected one of: {', '.join(FINDINGS)}"
        add(lines.get(("finding",)), f"unknown finding name {finding!r}{hint}")
        return report()
    expected_id = context_id(finding, data.get("context"), data.get("variant"))
    if data["id"] != expected_id:
        add(
            lines.get(("id",)),
            f"id {data['id']!r} should be {expected_id!r} (finding/context + variant)",
        )

    sources = data["sources"]
    used: set[str] = set()
    seen: dict[str, int] = {}
    for index, entry in enumerate(data["sentences"]):
        line = lines.get(("sentences", index, "text"), lines.get(("sentences", index)))
        sentence = entry["text"]
        if not sentence.strip():
            add(line, f"sentence {index + 1} is empty; delete it")
            continue
        if len(sentence) > config.max_sentence_chars:
            add(
                line,
                f"sentence {index + 1} has {len(sentence)} characters (limit "
                f"{config.max_sentence_chars}); split or shorten it",
            )
        if sentence != sentence.strip():
            add(line, f"sentence {index + 1} has leading or trailing spaces; remove them")
        if _CONTROL.search(sentence):
            add(line, f"sentence {index + 1} contains a line break, tab or control character")
        if entry["source"] not in sources:
            add(line, f"source {entry['source']!r} is not defined under 'sources'")
        used.add(entry["source"])
        key = _normalise(sentence)
        if key in seen:
            add(line, f"duplicate sentence (same as line {seen[key]}): {sentence!r}")
        else:
            seen[key] = line or 0
    for name in sources:
        if name not in used:
            add(
                lines.get(("sources", name)),
                f"source {name!r} is not used by any sentence",
                "warning",
            )

    computed = content_hash((e["polarity"], e["text"]) for e in data["sentences"])
    if data["content_hash"] != computed:
        add(
            lines.get(("content_hash",)),
            f"content_hash {data['content_hash']} does not match the sentences ({computed}): the "
            f"file was edited in place. Released versions are immutable: restore it, and save the "
            f"edit as version {data['version'] + 1} (chexretrieve anchors validate shows this)",
        )

    if finding is not None:
        n = len(data["sentences"])
        positives = sum(e["polarity"] == "positive" for e in data["sentences"])
        share = positives / n
        if n < config.min_sentences_warning:
            add(lines.get(("sentences",)), f"only {n} sentences", "warning")
        if positives == 0 or positives == n:
            add(lines.get(("sentences",)), f"all {n} sentences share one polarity", "warning")
        elif not config.min_positive_fraction <= share <= config.max_positive_fraction:
            add(
                lines.get(("sentences",)),
                f"{share:.0%} of sentences are positive (expected "
                f"{config.min_positive_fraction:.0%}-{config.max_positive_fraction:.0%})",
                "warning",
            )
    if any(p.severity == "error" for p in problems):
        return report()
    try:
        anchor_set = _build(data, Path(path))
    except AnchorSetError as exc:  # an invariant the checks above did not name
        add(None, str(exc))
        return report()
    return report(anchor_set)


def _build(data: dict[str, Any], path: Path) -> AnchorSet:
    sources = {
        name: AnchorSource(
            kind=src["kind"],
            model=src.get("model"),
            prompt=src.get("prompt"),
            date=src.get("date"),
            parameters=src.get("parameters", {}),
            note=src.get("note"),
        )
        for name, src in data["sources"].items()
    }
    entries = tuple(
        AnchorSentence(e["text"], e["polarity"], e["source"]) for e in data["sentences"]
    )
    return AnchorSet(
        id=data["id"],
        version=data["version"],
        finding=data.get("finding"),
        context=data.get("context"),
        variant=data.get("variant"),
        description=data["description"],
        created=data["created"],
        sources=sources,
        entries=entries,
        content_hash=data["content_hash"],
        path=path,
    )


def validate_anchor_file(
    path: str | Path, config: ValidationConfig | None = None
) -> ValidationReport:
    """Validate one file; a missing or unreadable file is reported, not raised."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = Problem(str(path), None, "error", f"cannot read the file: {exc}")
        return ValidationReport(path, (problem,), None)
    return parse_anchor_text(text, path, config)


def _raise_for(report: ValidationReport) -> AnchorSet:
    if report.errors or report.anchor_set is None:
        lines = "\n".join(str(p) for p in report.errors) or f"{report.path}: invalid"
        raise AnchorSetError(f"invalid anchor set file:\n{lines}", report.errors)
    # a warning (few sentences, one polarity) is shown by `anchors validate` and when a set is
    # saved; repeating it on every command that loads the sets only buries real messages
    for warning in report.warnings:
        log.debug("%s", warning)
    return report.anchor_set


@functools.lru_cache(maxsize=512)
def _load_cached(path: str, mtime_ns: int, size: int) -> AnchorSet:
    return _raise_for(validate_anchor_file(path))


def load_anchor_set(path: str | Path) -> AnchorSet:
    """Load and validate one file; raises AnchorSetError listing every problem as file:line."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as exc:
        raise AnchorSetError(f"{path}: cannot read the anchor set file: {exc}") from exc
    return _load_cached(str(path), stat.st_mtime_ns, stat.st_size)


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def format_anchor_set(anchor_set: AnchorSet) -> str:
    """The YAML text of a set: readable header, one sentence per line (diff-friendly)."""
    data = anchor_set.to_dict()
    out = [
        f"# Anchor set {anchor_set.key}: {anchor_set.name}"
        + (f", variant {anchor_set.variant}" if anchor_set.variant else ""),
        "# Released versions are immutable; edit by saving a new version "
        "(chexretrieve.anchors.save_new_version).",
    ]
    for key in (
        "schema",
        "id",
        "version",
        "finding",
        "context",
        "variant",
        "description",
        "created",
        "content_hash",
    ):
        if key in data:
            value = data[key]
            out.append(f"{key}: {value if isinstance(value, int) else _quote(value)}")
    out.append("sources:")
    for name, src in data["sources"].items():
        out.append(f"  {name}:")
        for key, value in src.items():
            if key == "prompt" and "\n" in value and _block_safe(value):
                out.append("    prompt: |-")
                out.extend(f"      {line}" if line else "" for line in value.split("\n"))
            else:
                out.append(f"    {key}: {json.dumps(value, ensure_ascii=False, sort_keys=True)}")
    out.append("sentences:")
    for e in data["sentences"]:
        out.append(
            f"  - {{text: {_quote(e['text'])}, polarity: {e['polarity']}, source: {e['source']}}}"
        )
    return "\n".join(out) + "\n"


def _block_safe(value: str) -> bool:
    """A prompt can be written as a YAML literal block when that reads back exactly."""
    lines = value.split("\n")
    return (
        not _CONTROL.search(value.replace("\n", ""))
        and value == value.strip()
        and all(line == line.rstrip() for line in lines)
    )


def save_new_version(
    anchor_set: AnchorSet, root: str | Path | None = None, *, allow_restricted: bool = False
) -> Path:
    """Write a new released version under ``root`` (default :func:`anchors_root`); never overwrite.

    Saving the identical content again is a no-op returning the existing path. A different file
    already at ``id@version`` raises AnchorSetError naming it: edit via ``anchor_set.revised()``.
    A set whose licence forbids redistribution is refused unless ``allow_restricted`` (the
    private anchors folder of ``chexretrieve.anchors.import_reports``, outside the repository).
    """
    restricted = [
        k for k, src in anchor_set.sources.items() if src.parameters.get("no_redistribution")
    ]
    if restricted and not allow_restricted:
        raise AnchorSetError(
            f"{anchor_set.key} contains text whose licence forbids redistribution (source "
            f"{restricted[0]!r}); it is for run-time use only and is never written to disk"
        )
    root = Path(root) if root is not None else anchors_root()
    path = root / anchor_set.relative_path()
    if path.exists():
        existing = load_anchor_set(path)
        if existing.content_hash == anchor_set.content_hash:
            return path
        raise AnchorSetError(
            f"{path} already holds {anchor_set.key} with different sentences "
            f"({existing.content_hash} vs {anchor_set.content_hash}); released versions are "
            f"immutable: save the edit as version {anchor_set.version + 1} (AnchorSet.revised)"
        )
    text = format_anchor_set(anchor_set)
    report = parse_anchor_text(text, path)
    if not report.ok or report.anchor_set != anchor_set:
        raise AnchorSetError(
            "internal error: the written form does not read back identically:\n"
            + "\n".join(str(p) for p in report.errors),
            report.errors,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        try:
            os.link(tmp, path)  # atomic and refuses to replace a file created meanwhile
        except FileExistsError as exc:
            raise AnchorSetError(f"{path} was created by someone else meanwhile; reload") from exc
    finally:
        os.unlink(tmp)
    return path


def anchor_files(root: str | Path | None = None, under: str | None = None) -> list[Path]:
    """Every anchor-set file under root (the schema folder excluded), sorted; with ``under``
    (a sub-folder such as ``findings/edema``) only those inside it."""
    root = Path(root) if root is not None else anchors_root()
    if not root.is_dir():
        raise AnchorSetError(
            f"anchors folder {root} does not exist; set CHEXRETRIEVE_ANCHORS or pass --root"
        )
    base = root / under if under else root
    return sorted(
        p
        for p in base.rglob("*")
        if p.suffix in _SUFFIXES
        and p.is_file()
        and "schema" not in p.relative_to(root).parts
        and not p.name.startswith(".")
    )


def find_anchor_sets(
    root: str | Path | None = None, finding: str | None = None, context: str | None = None
) -> list[AnchorSet]:
    """All sets under root, optionally for one finding or context; findings first, then contexts,
    each sorted by name, variant and version.

    Raises AnchorSetError listing every invalid file, and on two files with the same id@version.
    """
    root = Path(root) if root is not None else anchors_root()
    if finding is not None:  # only the finding's folder is listed (each search resolves a set)
        files = anchor_files(root, under=f"findings/{finding_slug(finding)}")
    else:
        files = anchor_files(root)
        if context is not None:
            files = [p for p in files if p.relative_to(root).as_posix().startswith(context + "-v")]
    sets, errors = [], []
    for path in files:
        try:
            sets.append(load_anchor_set(path))
        except AnchorSetError as exc:
            errors.append(str(exc))
    if errors:
        raise AnchorSetError("\n".join(errors))
    by_key: dict[str, AnchorSet] = {}
    for anchor_set in sets:
        if anchor_set.key in by_key:
            raise AnchorSetError(
                f"{anchor_set.path} and {by_key[anchor_set.key].path} both hold {anchor_set.key}"
            )
        by_key[anchor_set.key] = anchor_set
    if finding is not None:
        sets = [s for s in sets if s.finding == canonical_finding(finding)]
    if context is not None:
        sets = [s for s in sets if s.context == context]
    return sorted(sets, key=lambda s: (s.finding is None, s.name, s.variant or "", s.version))


def latest_variants(name: str, root: str | Path | None = None) -> list[AnchorSet]:
    """The newest version of every variant of a finding (or 'group/name' context), by variant."""
    sets = _sets_named(name, root)
    newest: dict[str | None, AnchorSet] = {}
    for anchor_set in sets:
        current = newest.get(anchor_set.variant)
        if current is None or anchor_set.version > current.version:
            newest[anchor_set.variant] = anchor_set
    return [newest[k] for k in sorted(newest, key=lambda v: v or "")]


def latest_anchor_set(
    name: str, variant: str | None = None, root: str | Path | None = None
) -> AnchorSet:
    """The newest version of one variant of a finding or context (default: the first variant)."""
    candidates = latest_variants(name, root)
    if variant is not None:
        candidates = [s for s in candidates if s.variant == variant]
    if not candidates:
        known = ", ".join(sorted({s.variant or "-" for s in _sets_named(name, root)})) or "none"
        raise AnchorSetError(
            f"no anchor set for {name!r}"
            + (f" variant {variant!r}" if variant else "")
            + f" under {Path(root) if root else anchors_root()} (variants there: {known})"
        )
    return candidates[0]


def _sets_named(name: str, root: str | Path | None) -> list[AnchorSet]:
    if "/" in name:
        return find_anchor_sets(root, context=name)
    return find_anchor_sets(root, finding=name)


def resolve_anchor_set(ref: str | Path, root: str | Path | None = None) -> AnchorSet:
    """A set from a file path, ``id@version`` (``pleural_effusion.a@2``) or ``id`` (newest)."""
    text = str(ref)
    path = Path(text)
    if path.suffix in _SUFFIXES and path.exists():
        return load_anchor_set(path)
    set_id, _, version = text.partition("@")
    candidates = [s for s in find_anchor_sets(root) if s.id == set_id]
    if version:
        candidates = [s for s in candidates if str(s.version) == version]
    if not candidates:
        known = sorted({s.id for s in find_anchor_sets(root)})
        raise AnchorSetError(
            f"no anchor set {text!r}: give a file path, an id@version or an id (ids: "
            f"{', '.join(known[:8])}{', ...' if len(known) > 8 else ''})"
        )
    return max(candidates, key=lambda s: s.version)
