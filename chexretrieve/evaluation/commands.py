"""`chexretrieve eval ...`: retrieval reports (Tables 2-4, Figs. 3-5), natural-image protocol.

Options become config dataclasses here; library code never sees typer objects. Heavy imports
(numpy, torch, matplotlib) happen inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import typer

from chexretrieve.evaluation.cli_options import (
    command_line,
    csv_items,
    finding_items,
    float_items,
    int_items,
)

eval_app = typer.Typer(
    help="Evaluation reports: per-finding AUPRC tables, figures and runtime.",
    no_args_is_help=True,
)


@eval_app.command("retrieval")
def retrieval_command(
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Report folder (default: eval/reports/<source>-<date>)."
    ),
    db: str | None = typer.Option(None, "--db", help="Store URL holding labels + embeddings."),
    chexpert_root: Path | None = typer.Option(
        None, "--chexpert-root", help="CheXpert-layout folder (train.csv, valid.csv, images)."
    ),
    checkpoint: list[Path] = typer.Option(
        [], "--checkpoint", help="CheXzero checkpoint .pt (repeatable; one interval cell each)."
    ),
    encoder: list[str] = typer.Option(
        [], "--encoder", help="Encoder spec (repeatable): phantom, chexzero:PT, hf-clip:DIR."
    ),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="CheXzero BPE tokenizer (.txt.gz or vocab.json+merges folder)."
    ),
    anchors_root: Path | None = typer.Option(
        None, "--anchors-root", help="Anchor-set folder (default: the project's anchors/)."
    ),
    prior: list[str] = typer.Option(
        [],
        "--prior",
        help="Private broad set (id@version or id) joining the posterior prior "
        "besides the --db store's own imported reports (repeatable).",
    ),  # fmt: skip
    findings: str | None = typer.Option(None, "--findings", help="Comma list (default: all 13)."),
    geometries: str | None = typer.Option(
        None, "--geometries", help="Comma list of geometry specs (default: all)."
    ),
    max_variants: int | None = typer.Option(None, "--max-variants", help="Anchor variants used."),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap replicates B."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap and anchor-draw seed."),
    blank_as: str = typer.Option("negative", "--blank-as", help="negative | drop"),
    uncertain_as: str = typer.Option("drop", "--uncertain-as", help="drop | negative | positive"),
    query_split: str = typer.Option(
        "valid", "--query-split", help="Split whose positives are the queries (MIMIC: test)."
    ),
    key_split: str = typer.Option("train", "--key-split", help="Split whose images are the keys."),
    view_choice: str = typer.Option(
        "frontal",
        "--views",
        help="frontal | lateral | all: views used as queries and keys (default frontal, as "
        "CheXzero evaluates; unknown views are left out unless all).",
    ),
    frontal_only: bool = typer.Option(
        False, "--frontal-only", hidden=True, help="Deprecated: --views frontal (the default)."
    ),
    allow_patient_overlap: bool = typer.Option(
        False,
        "--allow-patient-overlap",
        help="Evaluate although the query and key splits share patients (stated in the report).",
    ),
    min_queries: int = typer.Option(
        10, "--min-queries", help="Findings with fewer queries are skipped (listed in the report)."
    ),
    bootstrap_unit: str = typer.Option(
        "patient", "--bootstrap-unit", help="patient (cluster bootstrap) | image."
    ),
    query_resampling: str = typer.Option("shared", "--query-resampling", help="shared | per_cell"),
    experiments: str = typer.Option(
        "mixing,budget,posterior,temperature",
        "--experiments",
        help="Comma list, or none (runtime, Table 4, is opt-in: it times random embeddings and is "
        "noise on a busy machine).",
    ),
    inv_temperature: float | None = typer.Option(
        None,
        "--inv-temperature",
        help="Inverse temperature of the anchor geometries (default: the encoder's own "
        "exp(logit_scale); the paper uses 100).",
    ),
    temperatures: str | None = typer.Option(
        None, "--temperatures", help="inv_t grid of the temperature figure, e.g. 1,10,100."
    ),
    validation_labels: str = typer.Option(
        "truth", "--validation-labels", help="Phantom queries: truth | reported."
    ),
    mixing_findings: str | None = typer.Option(None, "--mixing-findings"),
    mixing_weights: str | None = typer.Option(None, "--mixing-weights", help="e.g. 0,0.5,1"),
    nuisance: str | None = typer.Option(None, "--nuisance", help="Nuisance anchor context."),
    nuisance_label: str | None = typer.Option(None, "--nuisance-label", help="Its label column."),
    budget_counts: str | None = typer.Option(None, "--budget-counts", help="e.g. 4,16,64"),
    posterior_counts: str | None = typer.Option(None, "--posterior-counts", help="e.g. 2,8,32"),
    curve_findings: str | None = typer.Option(
        None, "--curve-findings", help="Findings of the budget/posterior curves (default: all)."
    ),
    curve_max_findings: int = typer.Option(
        4,
        "--curve-max-findings",
        help="Without --curve-findings: findings with most queries (0: all).",
    ),
    curve_geometries: str | None = typer.Option(
        None, "--curve-geometries", help="Models of the budget/posterior curves (comma list)."
    ),
    posterior_geometries: str | None = typer.Option(
        None, "--posterior-geometries", help="Posterior models of Fig. 5 (default: twins)."
    ),
    repeats: int = typer.Option(3, "--repeats", help="Anchor draws per budget/posterior point."),
    runtime_queries: int = typer.Option(1000, "--runtime-queries", help="Q of Table 4."),
    runtime_gallery: int = typer.Option(10000, "--runtime-gallery", help="G of Table 4."),
    runtime_anchors: str | None = typer.Option(None, "--runtime-anchors", help="e.g. 10,100,1000"),
    phantom_n: int = typer.Option(1200, "--phantom-n", help="Phantom images (default source)."),
    phantom_seed: int = typer.Option(0, "--phantom-seed", help="Phantom world seed."),
    spread_seeds: str | None = typer.Option(
        None,
        "--spread-seeds",
        help="Phantom source: more world seeds (e.g. 5,6) whose Tables 2-3 are computed for the "
        "headline table: mean [min, max] over every world x encoder (the report's world counts).",
    ),
    max_images_per_split: int | None = typer.Option(
        None, "--max-images-per-split", help="CheXpert: sample this many images per split."
    ),
    cache_dir: Path | None = typer.Option(
        None,
        "--cache-dir",
        help="Embedding cache folder (default: eval/ under $CHEXRETRIEVE_CACHE, else "
        "$XDG_CACHE_HOME/chexretrieve).",
    ),
    device: str = typer.Option("auto", "--device", help="Encoder device: auto, cpu, cuda."),
    blas_threads: int = typer.Option(
        1, "--blas-threads", help="BLAS threads for fitting/scoring (0: library default)."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Per-finding AUPRC of every geometry, differences to cosine and ITI with 95% intervals
    (the paper's Tables 2 and 3), and the experiments of Figs. 3-5 and Table 4, as a report folder.

    Source: --db, or --chexpert-root with --checkpoint/--encoder, or (default) the phantom world
    (several --encoder: one interval cell each). A report folder is never overwritten.
    """
    options = dict(locals())  # every option as given, defaults resolved: the manifest records it
    from dataclasses import replace

    from rich.console import Console

    from chexretrieve.evaluation import config as C

    # a pipe or file gets wide lines instead of 80 columns of wrapped table cells
    console = Console() if sys.stdout.isatty() else Console(width=200)
    if db and chexpert_root:
        raise typer.BadParameter("give either --db or --chexpert-root, not both")
    name = "chexpert" if chexpert_root else "store" if db else "phantom"
    extra_worlds = int_items(spread_seeds, "--spread-seeds") or ()
    if extra_worlds and name != "phantom":
        raise typer.BadParameter(
            "--spread-seeds needs the phantom source (no --db/--chexpert-root)"
        )
    if len({phantom_seed, *extra_worlds}) != len(extra_worlds) + 1:
        raise typer.BadParameter(
            f"--spread-seeds {spread_seeds} repeats a world (--phantom-seed {phantom_seed} is "
            "always in the headline table); name each other world once"
        )
    out = _report_folder(out, name)
    err = Console(stderr=True)
    if frontal_only:
        if view_choice != "frontal":
            raise typer.BadParameter(f"--frontal-only contradicts --views {view_choice}; drop it")
        err.print("[yellow]--frontal-only is deprecated: frontal views are the default "
                  "(--views frontal | lateral | all)[/]")  # fmt: skip
    try:
        protocol = C.ProtocolConfig(
            key_split=key_split,
            query_split=query_split,
            blank_as=blank_as,
            uncertain_as=uncertain_as,
            views=view_choice,
            allow_patient_overlap=allow_patient_overlap,
            min_queries=min_queries,
        )
        intervals = C.IntervalConfig(
            n_bootstrap=bootstrap, seed=seed, query_resampling=query_resampling, unit=bootstrap_unit
        )
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    if inv_temperature is not None and inv_temperature <= 0:
        raise typer.BadParameter(f"--inv-temperature must be positive, got {inv_temperature}")
    retrieval = C.RetrievalEvalConfig(
        protocol=protocol,
        intervals=intervals,
        max_variants=max_variants,
        inv_temperature=inv_temperature,
    )
    temperature = C.TemperatureConfig()
    if (t := float_items(temperatures, "--temperatures")) is not None:
        try:
            temperature = replace(temperature, inv_temperatures=t)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
    if (f := finding_items(findings)) is not None:
        retrieval = replace(retrieval, findings=f)
    if (g := csv_items(geometries)) is not None:
        retrieval = replace(retrieval, geometries=g)
    mixing = C.MixingConfig()
    if (f := finding_items(mixing_findings)) is not None:
        mixing = replace(mixing, findings=f)
    if (w := float_items(mixing_weights, "--mixing-weights")) is not None:
        mixing = replace(mixing, weights=w)
    if nuisance:
        mixing = replace(mixing, nuisance=nuisance)
    curve = finding_items(curve_findings) or ()
    most = curve_max_findings or None
    budget = C.BudgetConfig(repeats=repeats, seed=seed, findings=curve, max_findings=most)
    if (n := int_items(budget_counts, "--budget-counts")) is not None:
        budget = replace(budget, anchor_counts=n)
    posterior = C.PosteriorConfig(repeats=repeats, seed=seed, findings=curve, max_findings=most)
    if (g := csv_items(curve_geometries)) is not None:
        budget = replace(budget, geometries=g)
        posterior = replace(posterior, geometries=g)
    if (g := csv_items(posterior_geometries)) is not None:
        posterior = replace(posterior, posterior_geometries=g)
    if (n := int_items(posterior_counts, "--posterior-counts")) is not None:
        posterior = replace(posterior, target_counts=n)
    runtime = C.RuntimeConfig(n_queries=runtime_queries, n_gallery=runtime_gallery, seed=seed)
    if (n := int_items(runtime_anchors, "--runtime-anchors")) is not None:
        runtime = replace(runtime, anchor_counts=n)

    from chexretrieve.encoders import EncoderConfig
    from chexretrieve.evaluation.cohort import select_cohort
    from chexretrieve.evaluation.sources import load_anchor_texts

    encoder_config = EncoderConfig(device=device, tokenizer_path=tokenizer)
    from chexretrieve.anchors.anchor_set import AnchorSetError
    from chexretrieve.store import database_identity

    try:  # a private report corpus joins only for its own store, or when named
        store_identity = database_identity(db) if db and not chexpert_root else None
        texts = load_anchor_texts(
            anchors_root, retrieval.findings, max_variants, store=store_identity, prior=prior
        )
    except AnchorSetError as exc:
        _fail(exc)
    specs = [f"chexzero:{p}" for p in checkpoint] + list(encoder)
    show = not quiet
    # images the store left out for want of a labels row, by split (None: the other sources list
    # images by their label rows)
    unlabelled: dict[str, int] | None = {} if db else None
    worlds: list[int] = []
    if cache_dir is None:
        from chexretrieve.cache import cache_folder

        cache_dir = cache_folder("eval")
    if chexpert_root:
        from chexretrieve.evaluation.sources import chexpert_source, read_chexpert_folder

        try:  # splits and views are checked before minutes of embedding
            precheck, _ = read_chexpert_folder(
                chexpert_root, max_images_per_split=max_images_per_split
            )
            select_cohort(precheck, protocol)
        except ValueError as exc:  # a leaking split, no such file, no lateral views: exit 2
            _fail(exc)
        archive, views = chexpert_source(
            chexpert_root,
            specs,
            texts,
            encoder_config=encoder_config,
            cache_dir=cache_dir,
            max_images_per_split=max_images_per_split,
            show_progress=show,
        )
        source = f"CheXpert-layout folder {chexpert_root}"
        mixing = replace(mixing, nuisance_label=nuisance_label or "AP/PA")
    elif db:
        from chexretrieve.evaluation.sources import store_source

        try:
            store_notes: list[str] = []
            archive, views = store_source(
                db,
                specs or ["phantom"],
                texts,
                encoder_config=encoder_config,
                cache_dir=cache_dir,
                notes=store_notes,
                unlabelled=unlabelled,
            )
        except ValueError as exc:  # no such store, no such encoder: one line, exit 2
            _fail(exc)
        source = f"store {db}" + "".join(f"; {n}" for n in store_notes)
        mixing = replace(mixing, nuisance_label=nuisance_label or "view_position")
    else:
        from chexretrieve.evaluation.phantom_source import phantom_source

        specs = specs or ["phantom"]
        try:
            phantom = C.PhantomSourceConfig(
                n_images=phantom_n,
                seed=phantom_seed,
                cache_dir=str(cache_dir),
                validation_labels=validation_labels,
            )
            archive, views = phantom_source(
                phantom,
                texts,
                encoder_specs=specs,
                encoder_config=encoder_config,
                show_progress=show,
            )
        except ValueError as error:
            raise typer.BadParameter(str(error)) from None
        encoders_word = (
            "the phantom encoder" if len(specs) == 1 else f"{len(specs)} phantom encoders"
        )
        source = (
            f"phantom world (SIMULATION), seed {phantom_seed}, {phantom_n} images, generated in "
            f"memory and embedded by {encoders_word}; query (validation) labels: "
            f"{validation_labels}"
        )
        worlds = [phantom_seed, *extra_worlds]
        mixing = replace(mixing, nuisance_label=nuisance_label or "AP/PA")
    plan = C.EvaluationPlan(
        retrieval=retrieval,
        experiments=csv_items(experiments) or (),
        mixing=mixing,
        budget=budget,
        posterior=posterior,
        runtime=runtime,
        temperature=temperature,
        blas_threads=blas_threads or None,
    )
    context = RunContext(
        name=name,
        source=source,
        texts=texts,
        specs=specs or ["phantom"],
        options=options,
        anchors={
            "root": anchors_root,
            "findings": retrieval.findings,
            "max_variants": max_variants,
        },
        worlds=worlds,
        unlabelled=unlabelled,
        spread_world=(
            (
                lambda seed: phantom_source(
                    replace(phantom, seed=seed),
                    texts,
                    encoder_specs=specs,
                    encoder_config=encoder_config,
                    show_progress=show,
                )
            )  # fmt: skip
            if name == "phantom"
            else None
        ),
    )
    _run_and_write(archive, views, plan, out, context, console, show)


def _fail(error: Exception, code: int = 2):
    """One red line on stderr, then exit ``code`` (2: bad input or data; 1: nothing evaluated)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error:[/red] {escape(str(error))}")
    raise typer.Exit(code) from None


def _report_folder(out: Path | None, name: str) -> Path:
    """``--out`` when it is new or empty (refused otherwise, before any work), else a fresh
    default folder eval/reports/<source>-<date>[-N]."""
    from chexretrieve.evaluation.report import choose_report_folder

    try:
        return choose_report_folder(
            out, Path("eval/reports") / f"{name}-{dt.date.today().isoformat()}"
        )
    except FileExistsError as error:
        _fail(error)


@dataclass
class RunContext:
    """What the retrieval command knows about a run besides the archive, views and plan."""

    name: str  # source kind: phantom, chexpert, store
    source: str  # the report's Source line
    texts: object  # AnchorTexts
    specs: list[str]  # encoder specs, in the order of the views
    options: dict  # the command's options (manifest)
    anchors: dict  # how the anchor sets were chosen (root, findings, max_variants)
    worlds: list[int] = field(default_factory=list)  # phantom worlds: the report's, then spread
    unlabelled: dict | None = None  # images without a labels row, by split (None: not applicable)
    spread_world: Callable | None = None  # seed -> (archive, views) of another phantom world


def _run_and_write(archive, views, plan, out: Path, context: RunContext, console, show) -> None:
    from chexretrieve.evaluation.cohort import PatientOverlapError
    from chexretrieve.evaluation.pipeline import NothingEvaluatedError, evaluate
    from chexretrieve.evaluation.provenance import report_provenance
    from chexretrieve.evaluation.report import table2_frames, table3_frames, write_report
    from chexretrieve.evaluation.tables import to_rich

    try:
        report = evaluate(
            archive,
            views,
            plan,
            title=f"Retrieval evaluation: {context.name}",
            command=command_line(),
            source=context.source,
            show_progress=show,
            broad_sets=context.texts.broad_sets,
            unlabelled=context.unlabelled,
        )
    except PatientOverlapError as exc:
        _fail(exc)
    except NothingEvaluatedError as exc:
        _fail(exc, code=1)
    texts = context.texts
    report.settings["anchor_sets"] = list(texts.provenance)
    report.settings["prior"] = {"fingerprint": texts.prior_fingerprint, "sets": list(texts.prior)}
    for key, why in texts.prior_left_out:  # never silently: a private set outside this prior
        report.notes.append(
            f"The private broad set {key} ({why}) is not in this prior; `--prior {key}` adds it."
        )
    if len(context.worlds) > 1 and context.spread_world is not None:
        from chexretrieve.evaluation.spread import add_spread

        add_spread(report, context.worlds, context.spread_world, plan, show)
    report.provenance = report_provenance(
        "retrieval",
        encoders=list(zip(context.specs, [v.encoder_id for v in views], strict=True)),
        worlds=context.worlds,
        texts=context.texts,
        anchors=context.anchors,
        options=context.options,
    )
    paths = write_report(report, out)
    for title, (text, means), compact in (
        ("Table 2: softmax anchor divergence − reference (AUPRC)", table2_frames(report), False),
        (
            "Table 3: anchor geometry − cosine (AUPRC; intervals in the report)",
            table3_frames(report),
            True,
        ),
    ):
        if not text.empty:
            console.print(to_rich(text, means, title=title, compact=compact))
    for note in report.notes:
        console.print(f"[yellow]{note}[/]")
    if report.run is not None and report.run.skipped:
        for what, why in report.run.skipped:
            console.print(f"[yellow]skipped {what}: {why}[/]")
    console.print(f"report: {paths['html']}  ({paths['markdown']})")


@eval_app.command("runtime")
def runtime_command(
    queries: int = typer.Option(1000, "--queries", help="Q queries."),
    gallery: int = typer.Option(10000, "--gallery", help="G gallery items."),
    dim: int = typer.Option(512, "--dim", help="Embedding dimension."),
    anchors: str = typer.Option("10,100,1000,10000", "--anchors", help="Anchor-set sizes N."),
    geometries: str = typer.Option("cosine,softmax,gaussian,latent_gaussian", "--geometries"),
    repeats: int = typer.Option(3, "--repeats"),
    warmup: int = typer.Option(1, "--warmup"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda (scoring matmul)."),
    out: Path | None = typer.Option(None, "--out", help="Also write CSV + PNG here."),
) -> None:
    """Table 4: fit + features + top-k retrieval time vs number of anchors (random embeddings)."""
    from rich.console import Console
    from rich.table import Table

    from chexretrieve.evaluation.config import RuntimeConfig
    from chexretrieve.evaluation.runtime import runtime_table, time_retrieval

    config = RuntimeConfig(
        n_queries=queries,
        n_gallery=gallery,
        dim=dim,
        anchor_counts=int_items(anchors, "--anchors") or (),
        geometries=csv_items(geometries) or (),
        repeats=repeats,
        warmup=warmup,
        device=device,
    )
    frame = time_retrieval(config)
    table = runtime_table(frame)
    rich_table = Table(title=f"seconds, {queries} queries x {gallery} gallery, d={dim}")
    rich_table.add_column("N anchors", justify="right")
    for col in table.columns:
        rich_table.add_column(str(col), justify="right")
    for n, row in table.iterrows():
        rich_table.add_row(str(n), *[f"{v:.3f}" for v in row])
    Console().print(rich_table)
    if out:
        from chexretrieve.evaluation import figures as F

        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "runtime.csv", index=False)
        F.save_figure(F.runtime_curves(frame, rich_table.title), out / "runtime.png")


from chexretrieve.evaluation.natural_commands import natural_command  # noqa: E402

eval_app.command("natural")(natural_command)

from chexretrieve.evaluation.density_commands import density_command  # noqa: E402

eval_app.command("density")(density_command)
