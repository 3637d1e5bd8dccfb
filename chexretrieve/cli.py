"""The `chexretrieve` command line: builds config dataclasses and calls library code.

Each command group lives beside the code it drives (``chexretrieve/<package>/commands.py``), or in
``chexretrieve/app/`` when it composes several packages (``search``, ``ingest``), and is registered
here. Heavy imports (torch, pydicom, gradio) happen inside the commands, so
``--help`` and ``--version`` stay fast.
"""

from __future__ import annotations

import typer

# Typer 0.29 carries its own copy of Click: its exceptions are these, not the `click` package's
from typer._click.exceptions import ClickException, UsageError
from typer.core import TyperGroup

from chexretrieve import __version__
from chexretrieve.encoders.base import EncoderError


class _CommandGroup(TyperGroup):
    """The root group: an encoder that cannot be loaded or used ends any command with one line on
    stderr and exit status 2 (its message says what to change), never a traceback. A bad option
    of a command is said in the same style, ``error: ...`` and where to read its help (not
    Click's boxed panel)."""

    def invoke(self, ctx):  # noqa: ANN001, ANN201
        try:
            return super().invoke(ctx)
        except EncoderError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
        except ClickException as error:
            typer.echo(f"error: {error.format_message()}", err=True)
            context = getattr(error, "ctx", None)
            if isinstance(error, UsageError):
                path = context.command_path if context is not None else "chexretrieve"
                typer.echo(f"(see `{path} --help`)", err=True)
            raise typer.Exit(error.exit_code) from None


app = typer.Typer(
    cls=_CommandGroup,
    name="chexretrieve",
    help="Finding-specific chest X-ray case retrieval (anchor-divergence geometries).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"chexretrieve {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Finding-specific chest X-ray case retrieval."""


@app.command("demo")
def demo_command(
    data_dir: str = typer.Option("data/demo", "--data-dir", help="Archive, database and caches."),
    n_images: int = typer.Option(3000, "--n-images", help="Phantom images on the first run."),
    serve: bool = typer.Option(True, "--serve/--no-serve", help="Open the UI at the end."),
    port: int = typer.Option(7860, "--port", help="UI port (bound to 127.0.0.1)."),
    first_page: int = typer.Option(
        300, "--first-page", help="A first run opens the page once this many are stored."
    ),
) -> None:
    """Run the end-to-end demo: phantom archive -> ingest -> case-lookup UI (see README)."""
    from pathlib import Path

    from rich.console import Console
    from rich.markup import escape

    from chexretrieve.demo import run_demo
    from chexretrieve.demo.config import DemoConfig

    try:
        config = DemoConfig(
            data_dir=Path(data_dir), n_images=n_images, serve=serve, port=port,
            first_page_images=first_page,
        )  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        run_demo(config)
    except (ValueError, OSError) as exc:  # busy port, unwritable folder: one line, no traceback
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None


from chexretrieve.app.commands import search_command  # noqa: E402

app.command("search")(search_command)

from chexretrieve.ui.commands import serve_command  # noqa: E402

app.command("serve")(serve_command)

from chexretrieve.evaluation.commands import eval_app  # noqa: E402

app.add_typer(eval_app, name="eval")

from chexretrieve.app.ingest_commands import ingest_command  # noqa: E402

app.command("ingest")(ingest_command)

from chexretrieve.evaluation.phantom_commands import gates_command, train_command  # noqa: E402
from chexretrieve.phantom.commands import phantom_app  # noqa: E402

phantom_app.command("train")(train_command)
phantom_app.command("gates")(gates_command)

app.add_typer(phantom_app, name="phantom")

from chexretrieve.anchors.commands import anchors_app  # noqa: E402

app.add_typer(anchors_app, name="anchors")

from chexretrieve.encoders.commands import encoders_app  # noqa: E402

app.add_typer(encoders_app, name="encoders")

from chexretrieve.audit.commands import audit_app  # noqa: E402

app.add_typer(audit_app, name="audit")

from chexretrieve.app.db_commands import db_app  # noqa: E402

app.add_typer(db_app, name="db")

from chexretrieve.app.index_commands import index_app  # noqa: E402

app.add_typer(index_app, name="index")


@app.command("settings")
def settings_command(
    markdown: bool = typer.Option(
        False, "--markdown", help="Print the Markdown tables of the documentation site instead."
    ),
    match: str = typer.Option(
        "", "--match", help="Only settings whose Class.field contains this text (any case)."
    ),
) -> None:
    """Every setting (configuration dataclass field) with its default and meaning."""
    from chexretrieve.settings_reference import settings, settings_markdown, settings_text

    if markdown:
        typer.echo(settings_markdown())
        return
    if match:
        wanted = [s for s in settings() if match.lower() in f"{s.owner}.{s.name}".lower()]
        if not wanted:
            typer.echo(f"error: no setting matches {match!r}", err=True)
            raise typer.Exit(2)
        typer.echo(settings_text(only=wanted))
        return
    typer.echo(settings_text())


from chexretrieve.app.density_commands import density_app  # noqa: E402

app.add_typer(density_app, name="density")

from chexretrieve.accounts.commands import users_app  # noqa: E402

app.add_typer(users_app, name="users")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
