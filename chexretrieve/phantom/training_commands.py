"""`chexretrieve phantom train` and `chexretrieve phantom zero-shot`, added to the phantom group.

Heavy imports (torch, transformers) happen inside the commands so `--help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

#: the committed weights' file name; `phantom train` writes here by default (in the working folder)
DEFAULT_TRAIN_OUT = Path("phantom-v1.pt")


def train_command(
    out: Path = typer.Option(DEFAULT_TRAIN_OUT, "--out", help="Weights file to write."),
    seed: int = typer.Option(0, "--seed", help="Seed of the phantom world and of the training."),
    steps: int | None = typer.Option(None, "--steps", help="Optimiser steps (default: 1400)."),
    n_images: int | None = typer.Option(
        None, "--n-images", help="Training-split phantoms to draw (default: 6000)."
    ),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Images per step."),
    threads: int = typer.Option(2, "--threads", help="CPU threads and generator processes."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing weights file."),
) -> None:
    """Train the phantom encoder (image CNN + projection onto the frozen MiniLM) from a fixed seed.

    With the defaults this reproduces the bundled weights (SYNTHETIC phantoms only).
    """
    from dataclasses import replace

    from chexretrieve.phantom.training import PhantomTrainingConfig, train_phantom_encoder

    try:
        if out.exists() and not force:
            raise ValueError(f"{out} already exists; pass --force to overwrite it")
        if out.suffix != ".pt":
            raise ValueError(f"the weights file name must end in .pt, not {out.name!r}")
        config = PhantomTrainingConfig(seed=seed, threads=threads, device=device)
        changes = {"steps": steps, "n_images": n_images, "batch_size": batch_size}
        config = replace(config, **{k: v for k, v in changes.items() if v is not None})
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    result = train_phantom_encoder(config, out)
    typer.echo(
        f"wrote {result.path} (encoder id phantom:{result.sha256[:12]}, "
        f"{result.path.stat().st_size / 1e6:.1f} MB) in {result.seconds / 60:.1f} min "
        f"({result.cpu_seconds / 60:.1f} CPU-minutes); "
        f"final loss {sum(result.losses[-20:]) / len(result.losses[-20:]):.3f}"
    )


def zero_shot_command(
    weights: Path | None = typer.Option(
        None, "--weights", help="Phantom weights file (default: the bundled weights)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the phantom world."),
    n: int = typer.Option(3000, "--n", help="Validation-split cases to score."),
    size: int = typer.Option(320, "--size", help="Side of the generated phantoms in pixels."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    out: Path | None = typer.Option(None, "--out", help="Also write the table to this .md file."),
) -> None:
    """Zero-shot AUROC per finding on the phantom validation split, prompts ("{}", "no {}")."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from chexretrieve.encoders.config import EncoderConfig
    from chexretrieve.encoders.phantom import load_phantom_encoder
    from chexretrieve.phantom.config import PhantomConfig
    from chexretrieve.phantom.zero_shot import evaluate_zero_shot, zero_shot_report

    try:
        world = PhantomConfig(size=size)
        if seed < 0:
            raise ValueError(f"the seed must be a non-negative integer, got {seed}")
        if n < 10:
            raise ValueError(f"score at least 10 validation cases, got --n {n}")
        if out is not None and out.suffix != ".md":
            raise ValueError(f"the table is Markdown; give a path ending in .md, not {out}")
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    encoder = load_phantom_encoder(weights, EncoderConfig(device=device, batch_size=64))
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn()) as bar:
        task = bar.add_task("validation phantoms", total=n)
        results, _ = evaluate_zero_shot(encoder, seed, n, world, lambda k: bar.advance(task, k))
    command = "chexretrieve phantom zero-shot" + (f" --weights {weights}" if weights else "")
    command += f" --seed {seed} --n {n} --size {size}"
    text = zero_shot_report(encoder, results, command, seed, world)
    typer.echo(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}")
