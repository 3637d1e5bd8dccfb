"""`chexretrieve encoders check SPEC`: load an encoder and show what it is."""

from __future__ import annotations

from pathlib import Path

import typer

encoders_app = typer.Typer(
    help="Inspect image-text encoders.", no_args_is_help=True, add_completion=False
)


@encoders_app.command("check")
def check_command(
    spec: str = typer.Argument(
        ..., help="Encoder spec, e.g. chexzero:CKPT.pt?tokenizer=BPE.txt.gz (see: encoders list)"
    ),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="CheXzero BPE tokenizer (.txt.gz or vocab.json+merges folder)."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
) -> None:
    """Load SPEC, embed a blank image (and a sentence when text works), print id, size, 1/T."""
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from chexretrieve.encoders import EncoderConfig, EncoderError, load_encoder

    console = Console()
    try:
        encoder = load_encoder(spec, config=EncoderConfig(device=device, tokenizer_path=tokenizer))
        image = encoder.embed_images([np.full((256, 256), 0.5, dtype=np.float32)])
    except EncoderError as error:
        console.print(f"[red]cannot use encoder {spec!r}:[/red] {error}")
        raise typer.Exit(2) from None
    try:
        text = encoder.embed_texts(["no pleural effusion"])
        text_status = f"ok, cosine to the grey image {float(image[0] @ text[0]):+.3f}"
    except EncoderError as error:
        text_status = f"unavailable: {error}"
    table = Table(show_header=False)
    table.add_row("encoder id", encoder.encoder_id)
    table.add_row("embedding size", str(encoder.embed_dim))
    table.add_row("inverse temperature", f"{encoder.inv_temperature:.4g}")
    table.add_row("device", str(getattr(encoder, "device", "?")))
    table.add_row("image", f"ok, norm {float(np.linalg.norm(image[0])):.4f}")
    table.add_row("text", text_status)
    console.print(table)


@encoders_app.command("list")
def list_command() -> None:
    """The encoder kinds a spec can name, with the spec's form."""
    from rich.console import Console
    from rich.table import Table

    from chexretrieve.encoders import list_encoders

    table = Table()
    table.add_column("kind", no_wrap=True)
    table.add_column("spec", no_wrap=True)
    table.add_column("loads")
    for kind in list_encoders():
        table.add_row(kind.name, kind.form, kind.summary)
    Console().print(table)
