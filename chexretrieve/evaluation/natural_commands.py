"""`chexretrieve eval natural`: the object-style protocol over a labelled image folder."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

#: the code the natural-image report's numbers depend on (its manifest's provenance)
NATURAL_MODULES = (
    "chexretrieve/geometry",
    "chexretrieve/metrics.py",
    "chexretrieve/encoders/hf_clip.py",
    "chexretrieve/evaluation/natural.py",
    "chexretrieve/evaluation/intervals.py",
    "chexretrieve/evaluation/experiments.py",
)


def natural_command(
    root: Path = typer.Argument(
        ..., help="Folder: ROOT/<style>/<class>/<image>, or see --labels-csv."
    ),
    model: list[str] = typer.Option(
        ..., "--model", help="Hugging Face CLIP folder (repeatable; one interval cell each)."
    ),
    labels_csv: Path | None = typer.Option(
        None, "--labels-csv", help="CSV with path,class,style (paths relative to ROOT)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Report folder."),
    geometries: str = typer.Option(
        "cosine,softmax,gaussian,latent_spherical", "--geometries", help="Comma list."
    ),
    weights: str = typer.Option("0,0.25,0.5,0.75,1", "--weights", help="Class-anchor weights p."),
    bootstrap: int = typer.Option(1000, "--bootstrap"),
    seed: int = typer.Option(0, "--seed"),
    batch_size: int = typer.Option(32, "--batch-size"),
    device: str = typer.Option("auto", "--device"),
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """Class vs style retrieval with class and style anchors, and their mixture (paper Fig. 3).
    A report folder is never overwritten."""
    options = dict(locals())  # the manifest's provenance records them
    from rich.console import Console

    from chexretrieve.encoders import load_encoder
    from chexretrieve.evaluation.cli_options import command_line, csv_items, float_items
    from chexretrieve.evaluation.config import IntervalConfig, NaturalImageConfig
    from chexretrieve.evaluation.natural import (
        embed_natural_images,
        evaluate_natural,
        natural_anchor_texts,
        natural_table_wide,
        read_labelled_folder,
    )
    from chexretrieve.evaluation.report import (
        EvaluationReport,
        choose_report_folder,
        write_report,
    )
    from chexretrieve.evaluation.tables import to_rich

    try:
        out = choose_report_folder(
            out, Path("eval/reports") / f"natural-{dt.date.today().isoformat()}"
        )
    except FileExistsError as error:
        raise typer.BadParameter(str(error)) from None

    config = NaturalImageConfig(
        root=str(root),
        labels_csv=str(labels_csv) if labels_csv else None,
        weights=float_items(weights, "--weights") or (0.0, 1.0),
        geometries=csv_items(geometries) or ("cosine",),
        batch_size=batch_size,
    )
    intervals = IntervalConfig(n_bootstrap=bootstrap, seed=seed)
    archive, paths = read_labelled_folder(root, labels_csv)
    class_texts, style_texts = natural_anchor_texts(archive, config)
    views, colour = [], []
    for folder in model:
        encoder = load_encoder(f"hf-clip:{folder}", device)
        images, rgb = embed_natural_images(encoder, paths, batch_size, not quiet)
        colour.append(rgb)
        views.append(
            (
                encoder.encoder_id,
                float(encoder.inv_temperature),
                images,
                encoder.embed_texts(class_texts),
                encoder.embed_texts(style_texts),
            )
        )
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        table, mixing = evaluate_natural(archive, views, config, intervals, show_progress=not quiet)
    wide = natural_table_wide(table)
    colour_note = (
        "Images were embedded in colour."
        if all(colour)
        else "The encoder interface takes greyscale images: colour images were converted to luma "
        "grey before embedding, which removes colour cues from the style coordinate."
    )
    report = EvaluationReport(
        title="Natural-image protocol: class vs style",
        command=command_line(),
        source=f"labelled image folder {root} ({len(paths)} images); models: {', '.join(model)}",
        mixing=mixing,
        notes=[
            "Leave-one-out retrieval: every image queries all others; relevance = same class "
            "(class coordinate) or same style (style coordinate). Class anchors score the class "
            "coordinate, style anchors the style coordinate; cosine ignores anchors.",
            colour_note,
        ],
        extra_tables={"AUPRC per coordinate and geometry": wide},
        settings={"natural": config, "intervals": intervals},
    )
    from chexretrieve.evaluation.provenance import report_provenance

    report.provenance = report_provenance(
        "natural",
        encoders=[(f"hf-clip:{m}", v[0]) for m, v in zip(model, views, strict=True)],
        options=options,
        modules=NATURAL_MODULES,
    )
    paths_out = write_report(report, out)
    table.to_csv(paths_out["tables"] / "natural_auprc.csv", index=False)
    console = Console()
    console.print(to_rich(wide, title="AUPRC (leave-one-out)"))
    console.print(f"report: {paths_out['html']}")
