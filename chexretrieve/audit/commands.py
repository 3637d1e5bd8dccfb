"""`chexretrieve audit verify` and `chexretrieve audit export`.

verify: exit 0 when the file is intact and every line is keyed, 1 when a problem is found (the
first bad line is named), 3 when it is intact but holds lines written before records were keyed
(their integrity rests on an unkeyed chain), 2 on bad input.
export: the records chosen by --user / --study / --since / --action / --outcome / --client as JSON
lines or CSV; the file is
verified first and a damaged one is refused (``--allow-damaged`` exports it anyway, saying so);
the export itself is appended to the audit trail.
"""

from __future__ import annotations

from pathlib import Path

import typer

audit_app = typer.Typer(
    help="The audit trail: verify an audit file, export its records.", no_args_is_help=True
)

EXIT_DAMAGED = 1
EXIT_BAD_INPUT = 2
EXIT_UNKEYED = 3

_LOG = typer.Option(
    None, "--log", help="Audit file (default: $CHEXRETRIEVE_AUDIT_LOG, else the state folder's)."
)
_KEY = typer.Option(
    None,
    "--key",
    help="HMAC key file (default: $CHEXRETRIEVE_AUDIT_KEY, else ~/.config/chexretrieve/audit.key).",
)


def _err(message: str) -> None:
    typer.echo(message, err=True)


def _paths(log: Path | None, key: Path | None) -> tuple[Path, Path]:
    from chexretrieve.audit import AuditConfig

    config = AuditConfig(path=log, key_path=key)
    path = config.resolved_path
    if not path.is_file():
        _err(f"error: no audit file at {path}; pass --log FILE")
        raise typer.Exit(EXIT_BAD_INPUT)
    return path, config.resolved_key_path


@audit_app.command("verify")
def verify_command(log: Path | None = _LOG, key: Path | None = _KEY) -> None:
    """Check every record's HMAC, the hash chain, seq and the signed head record."""
    from chexretrieve.audit import check_audit_file

    path, key_path = _paths(log, key)
    report = check_audit_file(path, key_path)
    for problem in report.problems:
        _err(f"{path}: {problem}")
    for note in report.notes:
        _err(f"{path}: note: {note}")
    if report.problems:
        typer.echo(
            f"DAMAGED: {path}: {len(report.problems)} problem(s); first bad line: "
            f"{report.first_bad_line if report.first_bad_line is not None else 'none named'}"
        )
        raise typer.Exit(EXIT_DAMAGED)
    if report.unkeyed:
        typer.echo(
            f"UNKEYED: {path}: {report.lines} lines, chain intact, but {report.unkeyed} carry no "
            "HMAC (written before keyed audit records); they cannot be proven unedited"
        )
        raise typer.Exit(EXIT_UNKEYED)
    typer.echo(f"OK: {path}: {report.lines} records, every HMAC, the chain and the head match")


@audit_app.command("export")
def export_command(
    log: Path | None = _LOG,
    key: Path | None = _KEY,
    user: str | None = typer.Option(None, "--user", help="Only this user's records."),
    study: str | None = typer.Option(None, "--study", help="Only records naming this study UID."),
    since: str | None = typer.Option(None, "--since", help="Only records at/after (ISO, UTC)."),
    action: list[str] = typer.Option(
        [],
        "--action",
        help="Only records of this action (repeatable): search, view, export, sign_in, lockout, "
        "sign_out, session_revoked.",
    ),
    outcome: str | None = typer.Option(
        None,
        "--outcome",
        help="Only records with this outcome (sign-ins: signed_in, failed, throttled).",
    ),
    client: str | None = typer.Option(
        None, "--client", help="Only records from this client address (sign-ins, sign-outs)."
    ),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or csv."),
    output: Path | None = typer.Option(None, "--output", "-o", help="File (default: stdout)."),
    allow_damaged: bool = typer.Option(
        False, "--allow-damaged", help="Export a file that fails verification (says so)."
    ),
    exported_by: str | None = typer.Option(
        None, "--as", help="User recorded for this export (default: $CHEXRETRIEVE_USER / login)."
    ),
) -> None:
    """Export audit records (JSON lines or CSV); the export is itself audited."""
    from chexretrieve.audit import AuditLog, check_audit_file
    from chexretrieve.audit.log import ACTIONS, SIGN_IN_ACTIONS
    from chexretrieve.audit.verify import (
        audit_records,
        parse_since,
        records_as_csv,
        records_as_json_lines,
        select_records,
    )

    known = ACTIONS + SIGN_IN_ACTIONS
    unknown = sorted(set(action) - set(known))
    if unknown:
        _err(f"error: unknown --action {', '.join(unknown)}; use {', '.join(known)}")
        raise typer.Exit(EXIT_BAD_INPUT)
    if fmt not in ("jsonl", "csv"):
        _err(f"error: --format must be jsonl or csv, not {fmt!r}")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        moment = parse_since(since) if since else None
    except ValueError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    path, key_path = _paths(log, key)
    report = check_audit_file(path, key_path)
    if report.problems:
        for problem in report.problems:
            _err(f"{path}: {problem}")
        if not allow_damaged:
            _err("error: the audit file fails verification; nothing exported (--allow-damaged)")
            raise typer.Exit(EXIT_DAMAGED)
        _err("warning: exporting a damaged audit file (records may have been altered)")
    chosen = select_records(
        audit_records(path),
        user=user,
        study=study,
        since=moment,
        actions=action,
        outcome=outcome,
        client=client,
    )
    text = records_as_csv(chosen) if fmt == "csv" else records_as_json_lines(chosen)
    destination = str(output) if output else "stdout"
    try:
        AuditLog(path, key_path=key_path).record(
            "export",
            exported_by,
            what="audit",
            filters={
                "user": user,
                "study": study,
                "since": since,
                "action": list(action) or None,
                "outcome": outcome,
                "client": client,
                "format": fmt,
            },
            records=len(chosen),
            destination=destination,
        )
    except ValueError as exc:  # fail closed: an export that cannot be audited is not made
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_DAMAGED) from None
    if output:
        output.write_text(text, encoding="utf-8")
        _err(f"{len(chosen)} records written to {output}")
    else:
        typer.echo(text, nl=False)
