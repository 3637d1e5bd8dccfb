"""`chexretrieve audit verify` and `chexretrieve audit export`.

verify: exit 0 when the file is intact and every line is keyed, 1 when a problem is found (the
first bad line is named), 3 when it is intact but holds lines written before records were keyed
(their integrity rests on an unkeyed chain), 2 on bad input. The file is also checked against what
the store saw of it (``chexretrieve.audit.anchor``): the store named by ``--db``, else
``$CHEXRETRIEVE_DB``, else ``./chexretrieve.sqlite`` when it exists; a missing file the store saw
records in fails (exit 1), as does an emptied, cut or replaced one.
retire: mark the trails a store saw at a path, other than the file there now, as accounted for
(archived or lost; who, when and why are kept and signed): verify then notes them.
export: the records chosen by --user / --study / --since / --action / --outcome / --client as JSON
lines or CSV; the file is
verified first and a damaged one is refused (``--allow-damaged`` exports it anyway, saying so);
the export itself is appended to the audit trail.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

audit_app = typer.Typer(
    help="The audit trail: verify an audit file, export its records, retire a lost trail.",
    no_args_is_help=True,
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


_DB = typer.Option(
    None,
    "--db",
    help="Store whose record of the trail is checked (default: $CHEXRETRIEVE_DB, else "
    "./chexretrieve.sqlite if it exists).",
)


def _err(message: str) -> None:
    typer.echo(message, err=True)


def _paths(log: Path | None, key: Path | None, must_exist: bool = True) -> tuple[Path, Path]:
    from chexretrieve.audit import AuditConfig

    config = AuditConfig(path=log, key_path=key)
    path = config.resolved_path
    if must_exist and not path.is_file():
        _err(f"error: no audit file at {path}; pass --log FILE")
        raise typer.Exit(EXIT_BAD_INPUT)
    return path, config.resolved_key_path


def store_url(db: str | None) -> str | None:
    """The store the audit commands consult: ``--db``, else ``$CHEXRETRIEVE_DB``, else
    ``./chexretrieve.sqlite`` when it exists, else None."""
    from chexretrieve.store import DEFAULT_DB_URL, sqlite_file

    named = db or os.environ.get("CHEXRETRIEVE_DB", "").strip()
    if named:
        return named
    default = sqlite_file(DEFAULT_DB_URL)
    return DEFAULT_DB_URL if default is not None and default.is_file() else None


def _anchors(url: str, path: Path):  # noqa: ANN202
    """(the store's anchor rows of ``path`` and of the trail it holds, the store's label)."""
    from chexretrieve.audit.anchor import trail_id
    from chexretrieve.store import StoreError
    from chexretrieve.store.audit_anchor import AuditAnchorTable

    trail = None
    try:
        with path.open("rb") as handle:
            first = handle.readline().rstrip(b"\n")
        trail = trail_id(first) if first else None
    except OSError:
        pass
    table = AuditAnchorTable(url)
    try:
        return table.rows(path=str(path.resolve()), trail=trail), table.label
    except StoreError as exc:
        _err(f"error: {exc}; pass --db with a chexretrieve store (`chexretrieve db upgrade` "
             "migrates an older one)")  # fmt: skip
        raise typer.Exit(EXIT_BAD_INPUT) from None
    finally:
        table.close()


@audit_app.command("verify")
def verify_command(
    log: Path | None = _LOG,
    key: Path | None = _KEY,
    db: str | None = _DB,
    no_store: bool = typer.Option(
        False, "--no-store", help="Check the file alone (an older copy holds fewer records)."
    ),
) -> None:
    """Check the HMACs, the chain, seq, the head record, and the store's record of the trail.

    The file must still hold every record the store saw it hold."""
    from chexretrieve.audit import check_audit_file

    url = None if no_store else store_url(db)
    path, key_path = _paths(log, key, must_exist=url is None)
    anchors, label = _anchors(url, path) if url is not None else (None, "")
    if not path.exists() and not anchors:
        _err(f"error: no audit file at {path}, and {label} saw none there; pass --log FILE")
        raise typer.Exit(EXIT_BAD_INPUT)
    report = check_audit_file(path, key_path, anchors, label or "the store")
    if url is None:
        why = (
            "--no-store"
            if no_store
            else "none named by --db or $CHEXRETRIEVE_DB, no ./chexretrieve.sqlite"
        )
        report.notes.append(
            f"not checked against a store ({why}): a trail emptied together with its head "
            "record cannot be told from a new one"
        )
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
    anchored = f" and {label}'s record of it" if url is not None else ""
    typer.echo(
        f"OK: {path}: {report.lines} records, every HMAC, the chain and the head{anchored} match"
    )


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
    db: str | None = _DB,
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
    url = store_url(db)
    anchors, label = _anchors(url, path) if url is not None else (None, "")
    report = check_audit_file(path, key_path, anchors, label or "the store")
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
    witness = _witness(url)
    try:
        AuditLog(path, key_path=key_path, anchor=witness).record(
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
    if witness is not None:
        witness.flush(witness.exit_wait_s)
    if output:
        output.write_text(text, encoding="utf-8")
        _err(f"{len(chosen)} records written to {output}")
    else:
        typer.echo(text, nl=False)


def _witness(url: str | None):  # noqa: ANN202
    """A StoreWitness writing to the store at ``url`` (None without a store)."""
    if url is None:
        return None
    from chexretrieve.audit.anchor import StoreWitness
    from chexretrieve.store.audit_anchor import AuditAnchorTable

    return StoreWitness(AuditAnchorTable(url))


@audit_app.command("retire")
def retire_command(
    reason: str = typer.Option(..., "--reason", help="Why (e.g. 'archived to tape 2026-12')."),
    log: Path | None = _LOG,
    key: Path | None = _KEY,
    db: str | None = _DB,
    retired_by: str | None = typer.Option(
        None, "--as", help="Who retires them (default: $CHEXRETRIEVE_USER / login)."
    ),
) -> None:
    """Account for trails the store saw at this path that the file no longer holds.

    Each (archived or lost) is marked with who, when and why; verify then notes it instead of
    failing."""
    import datetime as dt

    from chexretrieve.audit.anchor import anchor_signed, retired_mac, trail_id
    from chexretrieve.audit.keys import AuditIntegrityError, read_key
    from chexretrieve.audit.log import current_user
    from chexretrieve.store import StoreError
    from chexretrieve.store.audit_anchor import AuditAnchorTable

    reason = " ".join(reason.split())
    if not reason or len(reason) > 500:
        _err("error: --reason must say why, in at most 500 characters")
        raise typer.Exit(EXIT_BAD_INPUT)
    url = store_url(db)
    if url is None:
        _err("error: no store named (--db or $CHEXRETRIEVE_DB)")
        raise typer.Exit(EXIT_BAD_INPUT)
    path, key_path = _paths(log, key, must_exist=False)
    try:
        secret = read_key(key_path)
    except AuditIntegrityError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    anchors, label = _anchors(url, path)
    current = None
    if path.is_file():
        with path.open("rb") as handle:
            first = handle.readline().rstrip(b"\n")
        current = trail_id(first) if first else None
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    note = f"retired by {retired_by or current_user()} at {stamp}: {reason}"
    table = AuditAnchorTable(url)
    retired = 0
    try:
        for row in anchors:
            if row["trail"] == current or row["path"] != str(path.resolve()) or row["retired"]:
                continue
            if not anchor_signed(secret, row):
                _err(f"error: {label}'s anchor of seq {row['seq']} fails its signature; left as is")
                continue
            retired += table.retire(row["trail"], note, retired_mac(secret, row, note))
    except StoreError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    finally:
        table.close()
    typer.echo(f"{retired} trail(s) seen at {path} retired in {label} ({note})")
