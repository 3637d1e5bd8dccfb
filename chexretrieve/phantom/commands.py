"""`chexretrieve phantom ...`: the phantom world's command group (make, sheet, zero-shot; train and
gates are added by chexretrieve.cli from chexretrieve.evaluation.phantom_commands)."""

from __future__ import annotations

from pathlib import Path

import typer

phantom_app = typer.Typer(
    name="phantom",
    help="The phantom world: SYNTHETIC chest radiographs with known truth (a simulation).",
    no_args_is_help=True,
)


@phantom_app.command("make")
def make_command(
    out: Path = typer.Argument(..., help="Output folder (must be empty unless --force)."),
    n: int = typer.Option(3000, "--n", help="Number of images."),
    seed: int = typer.Option(0, "--seed", help="Seed of the phantom world (>= 0)."),
    size: int = typer.Option(320, "--size", help="Image side in pixels (64-2048)."),
    workers: int = typer.Option(2, "--workers", help="Worker processes."),
    force: bool = typer.Option(False, "--force", help="Overwrite a previous archive in OUT."),
) -> None:
    """Write N phantom radiographs as DICOM with CheXpert-style labels, reports and splits."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from chexretrieve.phantom.archive import check_output, write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    try:
        archive = ArchiveConfig(n=n, seed=seed, force=force, workers=workers)
        phantom = PhantomConfig(size=size)
        if not force:
            check_output(out, force=False)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeRemainingColumn()) as bar:
        task = bar.add_task("phantoms", total=n)
        manifest = write_archive(out, archive, phantom, lambda k: bar.advance(task, k))
    typer.echo(
        f"wrote {manifest['n_images']} SYNTHETIC phantom images of {manifest['n_patients']} "
        f"patients ({manifest['n_valid_images']} validation images) to {out}"
    )


@phantom_app.command("sheet")
def sheet_command(
    out: Path = typer.Argument(..., help="PNG file to write."),
    seed: int = typer.Option(0, "--seed", help="Seed of the phantom world (>= 0)."),
    size: int = typer.Option(256, "--size", help="Tile size in pixels (64-2048)."),
) -> None:
    """Draw a contact sheet: a normal phantom and one tile per finding, labelled."""
    from chexretrieve.phantom.config import PhantomConfig
    from chexretrieve.phantom.sheet import contact_sheet

    try:
        config = PhantomConfig(size=size)
        if seed < 0:
            raise ValueError(f"the seed must be a non-negative integer, got {seed}")
        if out.suffix.lower() != ".png":
            raise ValueError(f"the contact sheet is a PNG; give a path ending in .png, not {out}")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    contact_sheet(out, seed=seed, config=config)
    typer.echo(f"wrote {out}")


# the phantom encoder's zero-shot table lives beside its code; `train` and `gates` measure the
# evaluation gates, so chexretrieve.cli adds them from chexretrieve.evaluation.phantom_commands
from chexretrieve.phantom.zero_shot_commands import zero_shot_command  # noqa: E402

phantom_app.command("zero-shot")(zero_shot_command)
