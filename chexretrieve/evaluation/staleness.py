"""Whether a committed report is still what the checkout gives: ``stale_reasons(manifest)`` checks
every part of the manifest's ``provenance`` block (``provenance.py``; the schema is documented in
docs/reports.md) against the checkout, and ``committed_manifests`` lists the reports the checkout
vouches for. ``tests/evaluation/test_committed_reports.py`` runs the check on every one of them.

Nothing in the package imports this module (it imports the report commands to parse their command
lines), so it adds no import cycle.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chexretrieve.evaluation.code_version import (
    CODE_MODULES,
    EVALUATION_CODE_VERSION,
    REPO_ROOT,
    code_fingerprints,
    expand_modules,
)
from chexretrieve.evaluation.provenance import (
    SCHEMA,
    anchor_records,
    command_options,
    encoder_weights_file,
    file_sha256,
    repo_relative,
    world_fingerprint,
)


def _report_commands():
    """The commands that write committed reports, under the names the CLI gives them
    (``chexretrieve eval ...``, ``chexretrieve phantom gates``), to parse recorded command lines."""
    import typer

    from chexretrieve.evaluation.commands import eval_app
    from chexretrieve.evaluation.phantom_commands import gates_command

    app = typer.Typer()
    app.add_typer(eval_app, name="eval")
    phantom = typer.Typer()
    phantom.command("gates")(gates_command)
    app.add_typer(phantom, name="phantom")
    return app


def resolve_options(command: str) -> dict[str, Any]:
    """The options a recorded command line gives with today's CLI (its defaults resolved), as
    ``command_options`` records them; ValueError when today's CLI rejects the line."""
    import typer.main

    argv = shlex.split(command)
    if argv and argv[0] == "chexretrieve":
        argv = argv[1:]
    app = typer.main.get_command(_report_commands())
    command_object, name, args, context = app, "chexretrieve", argv, None
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
                f"encoder {record['spec']!r} now loads {repo_relative(path)} (sha256 "
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
