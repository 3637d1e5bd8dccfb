"""`chexretrieve phantom train` and `chexretrieve phantom gates`: train the phantom encoder, then
measure its evaluation gates (``chexretrieve.evaluation.gates``) on a world it never saw.

They belong to the `phantom` command group but live here, beside the gates they print; the CLI root
(``chexretrieve.cli``) adds them to the group, so the phantom package never imports the evaluation
package. Heavy imports (torch, transformers) happen inside the commands so `--help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from chexretrieve.phantom.config import PhantomTrainingConfig

#: the defaults the help texts quote (one source: the config dataclass)
_TRAINING_DEFAULTS = PhantomTrainingConfig()
#: the committed weights' file name; `phantom train` writes here by default (in the working folder)
DEFAULT_TRAIN_OUT = Path("phantom-v4.pt")


def train_command(
    out: Path = typer.Option(DEFAULT_TRAIN_OUT, "--out", help="Weights file to write."),
    seed: int = typer.Option(
        1, "--seed", help="Seed of the training world and of the training (not the eval world 0)."
    ),
    steps: int | None = typer.Option(
        None, "--steps", help=f"Optimiser steps (default: {_TRAINING_DEFAULTS.steps})."
    ),
    n_images: int | None = typer.Option(
        None,
        "--n-images",
        help=f"Training-split phantoms to draw (default: {_TRAINING_DEFAULTS.n_images}).",
    ),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Images per step."),
    threads: int = typer.Option(2, "--threads", help="CPU threads and generator processes."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing weights file."),
    prompt_loss_weight: float | None = typer.Option(
        None,
        "--prompt-loss-weight",
        help="Experiments only: add a finding-prompt loss on the generator's truth (default 0).",
    ),
    gates: bool = typer.Option(
        True, "--gates/--no-gates", help="Measure the evaluation gates after training."
    ),
    eval_seed: int = typer.Option(0, "--eval-seed", help="World seed the gates are measured on."),
    eval_n: int = typer.Option(3000, "--eval-n", help="Images of that world (as the report)."),
    gates_out: Path | None = typer.Option(
        None, "--gates-out", help="Also write the gates page here (eval/phantom_zero_shot.md)."
    ),
) -> None:
    """Train the phantom encoder (image CNN + projection onto the frozen MiniLM) from a fixed seed,
    on report text alone, then measure its gates on the evaluation world (another seed).

    With the defaults this reproduces the bundled weights phantom-v4 (SYNTHETIC phantoms only);
    --seed 3 and --seed 4 make the two further independent runs issue 32 asks for (not bundled
    yet: eval/README.md).
    """
    from dataclasses import replace

    from chexretrieve.phantom.training import PhantomTrainingConfig, train_phantom_encoder

    try:
        if out.exists() and not force:
            raise ValueError(f"{out} already exists; pass --force to overwrite it")
        if out.suffix != ".pt":
            raise ValueError(f"the weights file name must end in .pt, not {out.name!r}")
        if gates and eval_seed == seed:
            raise ValueError(
                f"--eval-seed {eval_seed} is the training world; measure the gates on another "
                "world seed (or pass --no-gates)"
            )
        _check_page(gates_out)
        config = PhantomTrainingConfig(seed=seed, threads=threads, device=device)
        changes = {
            "steps": steps,
            "n_images": n_images,
            "batch_size": batch_size,
            "prompt_loss_weight": prompt_loss_weight,
        }
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
    if gates:
        command = f"chexretrieve phantom gates --weights {out} --seed {eval_seed} --n {eval_n}"
        _gates([str(out)], eval_seed, eval_n, device, gates_out, command)


def _check_page(out: Path | None) -> None:
    if out is not None and out.suffix != ".md":
        raise ValueError(f"the gates page is Markdown; give a path ending in .md, not {out}")


def _gates(
    weights: list[str | None],
    seed: int,
    n: int,
    device: str,
    out: Path | None,
    command: str,
    options: dict | None = None,
) -> None:
    """Measure, print and optionally write the gates of one or more weights files; the page gets
    a manifest beside it (``<page>.manifest.json``: the command and its provenance block)."""
    import json

    from chexretrieve.evaluation.gates import evaluate_gates, gates_page

    measured = evaluate_gates(weights, seed=seed, n_images=n, device=device)
    page = gates_page(measured, command)
    typer.echo(page)
    if out is not None:
        from chexretrieve.evaluation.provenance import report_provenance
        from chexretrieve.evaluation.sources import load_anchor_texts

        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
        specs = ["phantom" if w is None else f"phantom:{w}" for w in weights]
        provenance = report_provenance(
            "gates",
            encoders=[(s, e.encoder_id) for s, (e, _) in zip(specs, measured, strict=True)],
            worlds=[seed],
            texts=load_anchor_texts(None),
            anchors={"root": None, "findings": None, "max_variants": None},
            options=options,
        )
        manifest = {"command": command, "provenance": provenance}
        gates_manifest(out).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        typer.echo(f"wrote {out} and {gates_manifest(out)}")


def gates_manifest(page: Path) -> Path:
    """The manifest written beside a gates page: eval/phantom_zero_shot.manifest.json."""
    return page.with_name(f"{page.stem}.manifest.json")


def gates_command(
    weights: list[str] = typer.Option(
        [],
        "--weights",
        help="Phantom weights file or bundled name (repeatable; default: the bundled default).",
    ),
    seed: int = typer.Option(0, "--seed", help="Evaluation world seed (not the training seed)."),
    n: int = typer.Option(3000, "--n", help="Images of the evaluation world (train + valid)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    out: Path | None = typer.Option(
        None, "--out", help="Also write the page here (eval/phantom_zero_shot.md)."
    ),
) -> None:
    """Zero-shot AUROC, prompt-direction AP vs image-to-image AP, effective dimension and
    inv_t x cosine spread of one or more phantom encoders on an evaluation world none trained on."""
    options = dict(locals())
    try:
        if seed < 0:
            raise ValueError(f"the seed must be a non-negative integer, got {seed}")
        if n < 20:
            raise ValueError(f"the evaluation world needs at least 20 images, got --n {n}")
        _check_page(out)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    command = "chexretrieve phantom gates" + "".join(f" --weights {w}" for w in weights)
    command += f" --seed {seed} --n {n}" + (f" --out {out}" if out is not None else "")
    try:
        _gates(list(weights) or [None], seed, n, device, out, command, options)
    except ValueError as error:  # e.g. the weights were trained on this world
        raise typer.BadParameter(str(error)) from error
