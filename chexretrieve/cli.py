"""The `chexretrieve` command line: builds config dataclasses and calls library code.

Each command group lives beside the code it drives (``chexretrieve/<package>/commands.py``) and is
registered here. Heavy imports (torch, pydicom, gradio) happen inside the commands, so
``--help`` and ``--version`` stay fast.
"""

from __future__ import annotations

import typer

from chexretrieve import __version__

app = typer.Typer(
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
def demo_command() -> None:
    """Run the end-to-end demo (see README)."""
    from chexretrieve.demo import run_demo

    run_demo()


from chexretrieve.search.commands import search_command  # noqa: E402

app.command("search")(search_command)

from chexretrieve.ingest.commands import ingest_command  # noqa: E402

app.command("ingest")(ingest_command)

from chexretrieve.phantom.commands import phantom_app  # noqa: E402

app.add_typer(phantom_app, name="phantom")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
