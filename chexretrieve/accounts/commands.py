"""`chexretrieve users`: the accounts that may sign in to `chexretrieve serve`.

Passwords are read from a prompt (typed twice, not echoed) or, with ``--password-stdin``, from the
first line of standard input; never from the command line, where other users of the machine and
the shell history would see them. Each change is one line on stderr; errors exit with status 2.

A new password (``passwd``), a new role (``role``) and ``disable`` end every open session of the
account at once, in every server process on the store; ``sign-out`` only ends them. Each is
written to the audit trail (``session_revoked``, with how many sessions ended and who did it).
``$CHEXRETRIEVE_SITE_NAME`` (e.g. the hospital's name) joins the words a new password must not be
built from.
"""

from __future__ import annotations

import sys

import typer

users_app = typer.Typer(
    help="Accounts of the case-lookup server: add, disable, enable, passwd, role, sign-out, list.",
    no_args_is_help=True,
)

_DB_HELP = (
    "Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite if it exists, else the "
    "demo store); the accounts live in the store `serve` opens."
)


#: what ended sessions say on stderr (filled by the book's hook, printed after the change)
_ENDED: list[str] = []


def _book(db: str | None):  # noqa: ANN202
    import os

    from chexretrieve.accounts.book import AccountBook
    from chexretrieve.accounts.config import AccessConfig
    from chexretrieve.app.stores import resolve_read_store
    from chexretrieve.store import open_store

    site = os.environ.get("CHEXRETRIEVE_SITE_NAME", "").strip()
    config = AccessConfig()
    if site:
        config = AccessConfig(site_words=(*config.site_words, site))
    return AccountBook(open_store(resolve_read_store(db)), config, on_sessions_ended=_audited)


def _audited(name: str, reason: str, count: int) -> None:
    """Write the sessions an account change ended to the audit trail (and say so)."""
    from chexretrieve.audit import open_audit_log
    from chexretrieve.audit.log import current_user

    _ENDED.append(f"{count} open session(s) of {name} ended ({reason})")
    audit = open_audit_log()
    if audit is not None:
        audit.record(
            "session_revoked", name, outcome="revoked", reason=reason, sessions=count,
            by=current_user(), client="command line",
        )  # fmt: skip


def _read_password(from_stdin: bool, name: str, env: str | None = None) -> str:
    if env:
        import os

        password = os.environ.get(env, "")
        if not password:
            raise ValueError(f"--password-env {env}: that environment variable is empty or unset")
        return password
    if from_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if password.endswith("\r"):
            password = password[:-1]
        if not password:
            raise ValueError("no password on standard input (one line expected)")
        return password
    import getpass

    first = getpass.getpass(f"password for {name}: ")
    second = getpass.getpass("the same password again: ")
    if first != second:
        raise ValueError("the two passwords differ; nothing was changed")
    return first


def _run(action) -> None:  # noqa: ANN001
    from rich.console import Console
    from rich.markup import escape

    from chexretrieve.store import StoreError

    console = Console(stderr=True)
    _ENDED.clear()
    try:
        console.print(escape(action()))
    except (ValueError, StoreError, OSError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    finally:
        for line in _ENDED:
            console.print(escape(line))


_ROLE_HELP = (
    "radiologist (search, view), curator (+ anchor sets), admin (+ accounts, audit export)."
)


@users_app.command("add")
def add_command(
    name: str = typer.Argument(..., help="Login name (letters, digits, . _ @ -)."),
    role: str = typer.Option("radiologist", "--role", help=_ROLE_HELP),
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="Read the password from the first line of stdin."
    ),
    password_env: str | None = typer.Option(
        None,
        "--password-env",
        help="Read the password from this environment variable (container set-ups).",
    ),
    sso_only: bool = typer.Option(
        False, "--sso-only", help="No password: signs in only through the trusted proxy header."
    ),
    exists_ok: bool = typer.Option(
        False, "--exists-ok", help="An account of that name is left as it is (exit status 0)."
    ),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Add an account (the password is asked for twice, or read from stdin or a variable)."""

    def act() -> str:
        book = _book(db)
        from chexretrieve.accounts.book import check_name
        from chexretrieve.accounts.roles import check_role

        check_role(role)
        existing = book.table.get(check_name(name))
        if existing is not None and exists_ok:
            return f"{existing.name} exists already ({existing.role}); left as it is"
        password = None if sso_only else _read_password(password_stdin, name, password_env)
        row = book.add(name, role, password)
        how = "through the trusted proxy only" if sso_only else "with a password"
        return f"added {row.name} ({row.role}), signs in {how}"

    _run(act)


@users_app.command("passwd")
def passwd_command(
    name: str = typer.Argument(..., help="Login name."),
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="Read the password from the first line of stdin."
    ),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Set a new password (asked for twice, or read from stdin)."""

    def act() -> str:
        book = _book(db)
        if book.table.get(name.strip()) is None:
            raise ValueError(
                f"there is no user named {name!r}; add them with `chexretrieve users add`"
            )
        book.set_password(name, _read_password(password_stdin, name))
        return f"new password set for {name.strip()}"

    _run(act)


@users_app.command("disable")
def disable_command(
    name: str = typer.Argument(..., help="Login name."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Stop an account from signing in; its open sessions end at once."""
    _run(lambda: f"disabled {_book(db).disable(name).name}")


@users_app.command("enable")
def enable_command(
    name: str = typer.Argument(..., help="Login name."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Let a disabled account sign in again."""
    _run(lambda: f"enabled {_book(db).enable(name).name}")


@users_app.command("role")
def role_command(
    name: str = typer.Argument(..., help="Login name."),
    role: str = typer.Argument(..., help=_ROLE_HELP),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Change an account's role."""

    def act() -> str:
        row = _book(db).set_role(name, role)
        return f"{row.name} is now {row.role}"

    _run(act)


@users_app.command("sign-out")
def sign_out_command(
    name: str = typer.Argument(..., help="Login name."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """End every open session of an account (it may sign in again)."""

    def act() -> str:
        book = _book(db)
        row = book.table.get(name.strip())
        if row is None:
            raise ValueError(f"there is no user named {name!r}; list them with `users list`")
        book.end_sessions(row.name, "signed out by an administrator")
        return f"signed out {row.name} everywhere"

    _run(act)


@users_app.command("list")
def list_command(db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """The accounts: name, role, how they sign in, whether disabled (never a password hash)."""
    rows = []

    def act() -> str:
        rows.extend(_book(db).list())
        return f"{len(rows)} account(s)"

    _run(act)
    for row in rows:
        how = "password" if row.password_hash else "sso-only"
        state = "disabled" if row.disabled else "enabled"
        typer.echo(f"{row.name}\t{row.role}\t{how}\t{state}")
