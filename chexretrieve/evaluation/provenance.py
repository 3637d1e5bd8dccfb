"""What a report's numbers depend on: its manifest's ``provenance`` block (``staleness.py`` checks
a committed report's block against the checkout).

The block (schema 1, documented in docs/reports.md) is shared by every kind of committed report:
the retrieval report (``eval retrieval``), the gates page (``phantom gates``) and the density report
(``eval density``)::

    "provenance": {
      "schema": 1,
      "kind": "retrieval" | "gates" | "density" | ...,
      "code": {"version": EVALUATION_CODE_VERSION, "modules": {"chexretrieve/...py": "<hash>"}},
      "render_version": RENDER_VERSION,               # phantom reports only
      "worlds": [{"seed": 0, "generator_fingerprint": "<hash>"}],
      "encoders": [{"spec": "phantom:phantom-v4", "id": "phantom:...", "sha256": "<file hash>"}],
      "anchors": {"root": null, "findings": [...], "max_variants": null},
      "anchor_sets": [{"key": "edema.a@1", "content_hash": "sha256:...", "file": "anchors/..."}],
      "priors": [{"key": "broad_clinical@1", "content_hash": "sha256:...", "folder": "anchors"}],
      "options": {"phantom_n": 3000, ...}             # the command's options, defaults resolved
    }

Every part is optional except ``schema``, ``kind`` and ``code``; ``staleness.stale_reasons`` checks
each part present against the checkout and returns one sentence per mismatch (an empty list:
current).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from chexretrieve.evaluation.code_version import (
    CODE_MODULES,
    EVALUATION_CODE_VERSION,
    REPO_ROOT,
    code_fingerprints,
    code_record,
)

#: version of the provenance block's layout
SCHEMA = 1
#: command options that say where output goes or how it is shown, not what is computed
IGNORED_OPTIONS = frozenset({"out", "quiet", "cache_dir", "gates_out"})


# --------------------------------------------------------------------------------- recording
def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def repo_relative(path: str | Path | None) -> str | None:
    if path is None or str(path) == "":
        return None
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(resolved)


def encoder_weights_file(spec: str) -> Path | None:
    """The weights file an encoder spec loads (phantom: bundled name, id or path; chexzero: the
    checkpoint), None when the spec names a folder or nothing hashable."""
    from chexretrieve.encoders.registry import parse_encoder_spec

    parsed = parse_encoder_spec(spec)
    if parsed.kind == "phantom":
        from chexretrieve.encoders.phantom import resolve_phantom_weights

        return resolve_phantom_weights(parsed.argument or None)
    path = parsed.path
    return path if path is not None and path.is_file() else None


def encoder_record(spec: str, encoder_id: str) -> dict[str, Any]:
    """{spec, id, sha256, file} of one encoder a report used."""
    path = encoder_weights_file(spec)
    return {
        "spec": spec,
        "id": encoder_id,
        "sha256": file_sha256(path) if path is not None and path.is_file() else None,
        "file": repo_relative(path),
    }


def world_record(seed: int) -> dict[str, Any]:
    """{seed, generator_fingerprint} of a phantom world (the first 8 cases of its training split
    hashed, pixels and reports: ``phantom.splits.generator_fingerprint``)."""
    return {"seed": int(seed), "generator_fingerprint": world_fingerprint(seed)}


def world_fingerprint(seed: int) -> str:
    from chexretrieve.phantom import PhantomConfig, generate_case
    from chexretrieve.phantom.splits import generator_fingerprint, split_indices

    config = PhantomConfig()
    indices = split_indices(seed, "train", 8, config)
    return generator_fingerprint([generate_case(seed, i, config) for i in indices])


def anchor_records(records: Iterable[tuple[str, str, str]]) -> tuple[list[dict], list[dict]]:
    """(anchor_sets, priors) from ``AnchorTexts.records``: the broad sets (ids starting with
    "broad") are the prior; a prior set outside the checkout is named by its folder's name only."""
    sets, priors = [], []
    for key, content_hash, file in records:
        if key.startswith("broad"):
            folder = Path(file).parent if file else None
            inside = repo_relative(folder) if folder is not None else None
            shown = inside if inside and not inside.startswith("/") else "(outside the checkout)"
            priors.append({"key": key, "content_hash": content_hash, "folder": shown})
        else:
            sets.append({"key": key, "content_hash": content_hash, "file": repo_relative(file)})
    return sets, priors


def plain(value: Any) -> Any:
    """JSON-ready copy: paths and tuples become strings and lists, mappings plain dicts."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def command_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A command's options as recorded: plain values, output and display options left out."""
    return {k: plain(v) for k, v in sorted(options.items()) if k not in IGNORED_OPTIONS}


def report_provenance(
    kind: str,
    *,
    encoders: Sequence[tuple[str, str]] = (),
    worlds: Sequence[int] = (),
    texts=None,
    anchors: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    modules: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The provenance block of a report of ``kind``.

    ``encoders``: (spec, encoder id) pairs; ``worlds``: phantom world seeds; ``texts``: the
    ``AnchorTexts`` used (``anchors``: how they were chosen: root, findings, max_variants);
    ``options``: the command's options (``command_options``); ``modules``: the code the numbers
    depend on when ``kind`` is not in ``CODE_MODULES``."""
    if kind in CODE_MODULES:
        code = code_record(kind)
    elif modules:
        code = {"version": EVALUATION_CODE_VERSION, "modules": code_fingerprints(modules)}
    else:
        raise ValueError(f"report kind {kind!r} is not in CODE_MODULES: name its modules")
    block: dict[str, Any] = {"schema": SCHEMA, "kind": kind, "code": code}
    if worlds:
        from chexretrieve.phantom.config import RENDER_VERSION

        block["render_version"] = RENDER_VERSION
        block["worlds"] = [world_record(seed) for seed in dict.fromkeys(worlds)]
    if encoders:
        block["encoders"] = [encoder_record(spec, encoder_id) for spec, encoder_id in encoders]
    if texts is not None:
        block["anchors"] = plain(dict(anchors or {}))
        block["anchor_sets"], block["priors"] = anchor_records(texts.records)
    if options is not None:
        block["options"] = command_options(options)
    return block
