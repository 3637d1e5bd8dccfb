"""`chexretrieve phantom zero-shot`, added to the phantom group (`phantom train` and `phantom gates`
measure the evaluation gates, so they live in ``chexretrieve.evaluation.phantom_commands`` and the
CLI root adds them to the group: the phantom package never imports the evaluation package).

Heavy imports (torch, transformers) happen inside the commands so `--help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer


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
