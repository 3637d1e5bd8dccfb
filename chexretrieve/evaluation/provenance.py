"""What a report's numbers depend on (its manifest's ``provenance`` block), and the check that says
when the checkout would no longer give them.

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

Every part is optional except ``schema``, ``kind`` and ``code``; ``stale_reasons`` checks each part
present against the checkout and returns one sentence per mismatch (an empty list: current).
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from chexretrieve.evaluation.code_version import (
    CODE_MODULES,
    EVALUATION_CODE_VERSION,
    REPO_ROOT,
    code_fingerprints,
    code_record,
    expand_modules,
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


def _relative(path: str | Path | None) -> str | None:
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
        "file": _relative(path),
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
            inside = _relative(folder) if folder is not None else None
            shown = inside if inside and not inside.startswith("/") else "(outside the checkout)"
            priors.append({"key": key, "content_hash": content_hash, "folder": shown})
        else:
            sets.append({"key": key, "content_hash": content_hash, "file": _relative(file)})
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


# ------------------------------------------------------------------------------------ checking
def resolve_options(command: str) -> dict[str, Any]:
    """The options a recorded command line gives with today's CLI (its defaults resolved), as
    ``command_options`` records them; ValueError when today's CLI rejects the line."""
    import typer.main

    from chexretrieve.cli import app

    argv = shlex.split(command)
    if argv and argv[0] == "chexretrieve":
        argv = argv[1:]
    command_object, name, args, context = typer.main.get_command(app), "chexretrieve", argv, None
    try:
        while hasattr(command_object, "resolve_command"):
            context = command_object.make_context(
                name, args, parent=context, resilient_parsing=True
            )
            rest = [*getattr(context, "_protected_args", []), *context.args]
            name, command_object, args = command_object.resolve_command(context, rest)
            args = rest[1:]
        params = command_object.make_context(name, list(args), parent=context).params
    except Exception as error:  # a removed option, a renamed command: the report is stale
        raise ValueError(f"today's CLI rejects `{command}`: {error}") from error
    return command_options(params)


def _check_code(code: Mapping[str, Any], kind: str) -> list[str]:
    reasons = []
    if code.get("version") != EVALUATION_CODE_VERSION:
        reasons.append(
            f"evaluation code version {code.get('version')} (EVALUATION_CODE_VERSION is now "
            f"{EVALUATION_CODE_VERSION})"
        )
    recorded = dict(code.get("modules") or {})
    wanted = expand_modules(CODE_MODULES[kind]) if kind in CODE_MODULES else sorted(recorded)
    current = code_fingerprints(wanted)
    changed = [m for m in wanted if recorded.get(m) != current[m]]
    if changed:
        shown = ", ".join(changed[:6]) + (
            f" and {len(changed) - 6} more" if len(changed) > 6 else ""
        )
        reasons.append(f"code the numbers depend on changed since the report: {shown}")
    return reasons


def _check_worlds(block: Mapping[str, Any]) -> list[str]:
    from chexretrieve.phantom.config import RENDER_VERSION

    reasons = []
    if "render_version" in block and block["render_version"] != RENDER_VERSION:
        reasons.append(
            f"made with RENDER_VERSION {block['render_version']}; the generator is now at "
            f"RENDER_VERSION {RENDER_VERSION} (other phantom pixels)"
        )
    for world in block.get("worlds") or []:
        now = world_fingerprint(int(world["seed"]))
        if world.get("generator_fingerprint") != now:
            reasons.append(
                f"phantom world {world['seed']}: generator fingerprint "
                f"{world.get('generator_fingerprint')} then, {now} now"
            )
    return reasons


def _check_encoders(block: Mapping[str, Any]) -> list[str]:
    reasons = []
    for record in block.get("encoders") or []:
        try:
            path = encoder_weights_file(record["spec"])
        except Exception as error:  # an encoder spec today's registry refuses
            reasons.append(f"encoder {record['spec']!r} no longer resolves ({error})")
            continue
        now = file_sha256(path) if path is not None and path.is_file() else None
        then = str(record.get("sha256"))[:12]
        if now != record.get("sha256"):
            reasons.append(
                f"encoder {record['spec']!r} now loads {_relative(path)} (sha256 "
                f"{str(now)[:12]}), not the weights the report used ({then})"
            )
    return reasons


def _check_anchors(block: Mapping[str, Any]) -> list[str]:
    if "anchor_sets" not in block and "priors" not in block:
        return []
    from chexretrieve.evaluation.sources import load_anchor_texts
    from chexretrieve.findings import FINDINGS

    chosen = block.get("anchors") or {}
    texts = load_anchor_texts(
        chosen.get("root"), tuple(chosen.get("findings") or FINDINGS), chosen.get("max_variants")
    )
    sets, priors = anchor_records(texts.records)
    reasons = []
    if [(s["key"], s["content_hash"]) for s in sets] != [
        (s["key"], s["content_hash"]) for s in block.get("anchor_sets") or []
    ]:
        reasons.append("the anchor sets (ids, versions or content hashes) differ from the report's")
    if [(p["key"], p["content_hash"], p["folder"]) for p in priors] != [
        (p.get("key"), p.get("content_hash"), p.get("folder")) for p in block.get("priors") or []
    ]:
        reasons.append("the prior's broad sets (ids, content hashes or folders) differ")
    return reasons


def _check_options(block: Mapping[str, Any], command: str | None) -> list[str]:
    if "options" not in block:
        return []
    if not command:
        return ["the manifest records options but no command to check them against"]
    try:
        now = resolve_options(command)
    except ValueError as error:
        return [str(error)]
    recorded = dict(block["options"])
    changed = sorted(k for k in set(now) | set(recorded) if now.get(k) != recorded.get(k))
    if not changed:
        return []
    shown = "; ".join(f"{k}: {recorded.get(k)!r} then, {now.get(k)!r} now" for k in changed[:5])
    return [f"the command's options resolve differently today ({shown})"]


def stale_reasons(manifest: Mapping[str, Any]) -> list[str]:
    """Why the checkout would not give this manifest's report today (empty: it is current)."""
    block = manifest.get("provenance")
    if not isinstance(block, Mapping):
        return ["no provenance block: the report was made before manifests recorded the code, "
                "weights, generator and anchors it depends on"]  # fmt: skip
    if block.get("schema") != SCHEMA:
        return [f"provenance schema {block.get('schema')} (this checkout reads schema {SCHEMA})"]
    kind = str(block.get("kind", ""))
    if "code" not in block:
        return ["the provenance block records no code version"]
    return [
        *_check_code(block["code"], kind),
        *_check_worlds(block),
        *_check_encoders(block),
        *_check_anchors(block),
        *_check_options(block, manifest.get("command")),
    ]


#: the file that marks a report folder as superseded (its first line says by what, and why)
SUPERSEDED_MARKER = "SUPERSEDED"


def committed_manifests(root: Path = REPO_ROOT) -> list[Path]:
    """The manifests of the committed reports the checkout vouches for: every ``manifest.json``
    under ``eval/reports/`` outside a folder marked ``SUPERSEDED``, and ``eval/*.manifest.json``
    (the gates page's)."""
    reports = root / "eval" / "reports"
    found = []
    for manifest in sorted(reports.rglob("manifest.json")):
        folders = manifest.relative_to(reports).parents
        if not any((reports / folder / SUPERSEDED_MARKER).is_file() for folder in folders):
            found.append(manifest)
    return found + sorted((root / "eval").glob("*.manifest.json"))
