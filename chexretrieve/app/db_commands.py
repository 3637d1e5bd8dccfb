"""`chexretrieve db version` and `chexretrieve db upgrade`: a store's schema version, and bringing
an older store to this chexretrieve's (read commands never migrate; they say to run this)."""

from __future__ import annotations

import typer

db_app = typer.Typer(
    help="The store's schema: show its version, upgrade an older store.", no_args_is_help=True
)

_DB = typer.Option(
    None,
    "--db",
    help="Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite if it exists, "
    "else the demo store).",
)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@db_app.command("version")
def version_command(db: str | None = _DB) -> None:
    """Print the store's schema version and the one this chexretrieve expects."""
    from chexretrieve.app.stores import resolve_read_store
    from chexretrieve.store import database_label, schema_versions

    try:
        url = resolve_read_store(db)
        found, expected = schema_versions(url)
    except ValueError as exc:
        _fail(str(exc))
    state = "current" if found == expected else "needs `chexretrieve db upgrade`"
    typer.echo(f"{database_label(url)}: schema {found or 'none'}; expected {expected} ({state})")


@db_app.command("upgrade")
def upgrade_command(db: str | None = _DB) -> None:
    """Migrate an existing store to this chexretrieve's schema (back it up first)."""
    from chexretrieve.app.stores import resolve_read_store
    from chexretrieve.store import database_label, upgrade_store

    try:
        url = resolve_read_store(db)
        before, after = upgrade_store(url)
    except ValueError as exc:
        _fail(str(exc))
    label = database_label(url)
    if before == after:
        typer.echo(f"{label}: already at schema {after}")
    else:
        typer.echo(f"{label}: schema {before or 'none'} -> {after}")
