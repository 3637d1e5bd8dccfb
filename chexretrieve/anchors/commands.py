"""`chexretrieve anchors ...`: list, show, validate, diff, generate, embed, impact, import-reports.

Sets are named by file path, ``id@version`` (``pleural_effusion.a@1``) or ``id`` (newest version).
Exit status: 0 on success, 1 when validation finds errors (or warnings with --strict), 2 on bad
input (unknown set, unreachable endpoint, invalid answer: nothing is written then).
"""

from __future__ import annotations

from pathlib import Path

import typer

from chexretrieve import strict_json

anchors_app = typer.Typer(
    help="Versioned anchor sets: list, show, validate, diff, generate with an LLM, embed, impact.",
    no_args_is_help=True,
)

EXIT_INVALID = 1
EXIT_BAD_INPUT = 2

_ROOT = typer.Option(
    None,
    "--root",
    help="Anchors folder (default: $CHEXRETRIEVE_ANCHORS, else the repo's anchors/).",
)
_DB = typer.Option(
    None,
    "--db",
    help="SQLAlchemy URL of the store (default: $CHEXRETRIEVE_DB or ./chexretrieve.sqlite).",
)
_ENCODER = typer.Option(
    "phantom", "--encoder", help="Encoder spec: phantom, chexzero:FILE, hf-clip:DIR."
)


def _console():
    from rich.console import Console

    return Console()


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(code)


@anchors_app.command("list")
def list_command(
    finding: str | None = typer.Option(None, "--finding", help="Only this finding's sets."),
    root: Path | None = _ROOT,
) -> None:
    """Every anchor-set version (the private folder's imported corpora too, their file marked
    "private:"): key, name, size, polarity balance, source, file."""
    from rich.table import Table

    from chexretrieve.anchors.broad_prior import private_anchor_sets
    from chexretrieve.anchors.files import find_anchor_sets

    try:
        sets = find_anchor_sets(root, finding=finding)
        private = [s for s in private_anchor_sets() if finding is None or s.finding == finding]
    except ValueError as exc:
        _fail(str(exc))
    private_keys = {s.key for s in private}
    sets = sets + private
    columns = ("key", "finding / context", "n", "pos", "neg", "created", "source", "file")
    rows = []
    for s in sets:
        positives = s.polarities.count("positive")
        kinds = ",".join(sorted({src.kind for src in s.sources.values()}))
        rows.append(
            (s.key, s.name, str(len(s)), str(positives), str(len(s) - positives), s.created,
             kinds, ("private: " + str(s.path) if s.key in private_keys else
                     str(s.path.name if s.path else "")))
        )  # fmt: skip
    console = _console()
    if not console.is_terminal:  # piped: one tab-separated line per set, nothing cut or wrapped
        typer.echo(f"{len(sets)} anchor sets", err=True)
        typer.echo("\t".join(columns))
        for row in rows:
            typer.echo("\t".join(row))
        return
    table = Table(title=f"{len(sets)} anchor sets")
    for column in columns:
        # the key is what the other commands take: never wrapped or cut, whatever the width
        table.add_column(
            column,
            justify="right" if column in ("n", "pos", "neg") else "left",
            no_wrap=column == "key",
            min_width=max((len(r[0]) for r in rows), default=3) if column == "key" else None,
            overflow="fold",
        )
    for row in rows:
        table.add_row(*row)
    console.print(table)


@anchors_app.command("show")
def show_command(
    ref: str = typer.Argument(..., help="File path, id@version or id."),
    limit: int = typer.Option(0, "--limit", help="Show at most this many sentences (0: all)."),
    root: Path | None = _ROOT,
) -> None:
    """One set's metadata, sources and sentences."""
    from rich.markup import escape
    from rich.table import Table

    from chexretrieve.anchors.broad_prior import resolve_including_private

    try:
        s = resolve_including_private(ref, root)
    except ValueError as exc:
        _fail(str(exc))
    console = _console()
    console.print(f"[bold]{escape(s.key)}[/]  {escape(s.name)}  ({s.path})")
    console.print(f"{escape(s.description)}\ncreated {s.created}, {s.content_hash}")
    for name, src in s.sources.items():
        detail = ", ".join(
            f"{k}={v}" for k, v in src.to_dict().items() if k not in ("prompt", "note")
        )
        console.print(f"  source [cyan]{escape(name)}[/]: {escape(detail)}")
    table = Table(show_header=True)
    table.add_column("#", justify="right")
    table.add_column("polarity")
    table.add_column("sentence")
    entries = s.entries[:limit] if limit > 0 else s.entries
    for i, e in enumerate(entries, 1):
        colour = "green" if e.polarity == "positive" else "magenta"
        table.add_row(str(i), f"[{colour}]{e.polarity}[/]", escape(e.text))
    console.print(table)
    if len(entries) < len(s):
        console.print(f"... {len(s) - len(entries)} more (use --limit 0)")


@anchors_app.command("validate")
def validate_command(
    paths: list[Path] = typer.Argument(
        None, help="Files to check (default: every file under root)."
    ),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    root: Path | None = _ROOT,
) -> None:
    """Check files: schema, duplicates, lengths, finding names, content hash, polarity balance."""
    from rich.markup import escape

    from chexretrieve.anchors.files import anchor_files, validate_anchor_file

    try:
        files = list(paths) if paths else anchor_files(root)
    except ValueError as exc:
        _fail(str(exc))
    console = _console()
    errors = warnings = 0
    for path in files:
        report = validate_anchor_file(path)
        errors += len(report.errors)
        warnings += len(report.warnings)
        for problem in report.problems:
            colour = "red" if problem.severity == "error" else "yellow"
            console.print(f"[{colour}]{escape(str(problem))}[/]")
    console.print(f"{len(files)} files: {errors} errors, {warnings} warnings")
    if errors or (strict and warnings):
        raise typer.Exit(EXIT_INVALID)


@anchors_app.command("diff")
def diff_command(
    old: str = typer.Argument(..., help="The earlier set: path, id@version or id."),
    new: str = typer.Argument(..., help="The later set."),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
    root: Path | None = _ROOT,
) -> None:
    """Added, removed, reworded and polarity-flipped sentences between two sets."""
    from chexretrieve.anchors.broad_prior import resolve_including_private as resolve
    from chexretrieve.anchors.diff import diff_anchor_sets, render_diff

    try:
        diff = diff_anchor_sets(resolve(old, root), resolve(new, root))
    except ValueError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(strict_json.dumps(diff.to_dict(), indent=2, ensure_ascii=False))
    else:
        render_diff(diff, _console())


@anchors_app.command("generate")
def generate_command(
    finding: str = typer.Option(
        ..., "--finding", help="CheXpert finding, e.g. 'Pleural Effusion'."
    ),
    n: int = typer.Option(50, "--n", help="Sentences per variant."),
    variants: int = typer.Option(1, "--variants", help="Independent generations (new variants)."),
    model: str = typer.Option("gpt-4o-mini", "--model", help="Model name at the endpoint."),
    base_url: str = typer.Option(
        "https://api.openai.com/v1", "--base-url", help="OpenAI-compatible endpoint root."
    ),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="Environment variable holding the API key."
    ),
    prompt: str = typer.Option(
        "structured", "--prompt", help="structured or paper (Appendix E.6)."
    ),
    json_schema: bool = typer.Option(
        True, "--json-schema/--no-json-schema", help="Ask for a JSON-schema constrained answer."
    ),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds per HTTP answer."),
    retries: int = typer.Option(3, "--retries", help="Extra attempts on timeout / 429 / 5xx."),
    backoff: float = typer.Option(2.0, "--backoff", help="First back-off pause in seconds."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature."),
    root: Path | None = _ROOT,
) -> None:
    """Generate new variants with an LLM; all are checked before any file is written."""
    from rich.progress import Progress

    from chexretrieve.anchors.config import GenerationConfig
    from chexretrieve.anchors.generate import generate_and_save

    config = GenerationConfig(
        model=model,
        base_url=base_url,
        api_key_env=api_key_env,
        n=n,
        variants=variants,
        prompt_style=prompt,
        use_json_schema=json_schema,
        timeout_s=timeout,
        max_retries=retries,
        backoff_s=backoff,
        temperature=temperature,
    )
    try:
        with Progress(transient=True) as progress:
            task = progress.add_task(f"generating {finding}", total=variants)
            paths = generate_and_save(
                finding, config, root, progress=lambda done: progress.update(task, completed=done)
            )
    except ValueError as exc:
        _fail(str(exc))
    for path in paths:
        typer.echo(f"wrote {path}")


@anchors_app.command("embed")
def embed_command(
    refs: list[str] = typer.Argument(None, help="Sets to embed (default: newest of every set)."),
    encoder: str = _ENCODER,
    db: str | None = _DB,
    refresh: bool = typer.Option(False, "--refresh", help="Recompute even when cached."),
    root: Path | None = _ROOT,
) -> None:
    """Embed anchor sets (the private folder's imported corpora too) with an encoder and cache
    them per (set version, encoder) in the store."""
    from rich.progress import track
    from rich.table import Table

    from chexretrieve.anchors.broad_prior import private_anchor_sets, resolve_including_private
    from chexretrieve.anchors.curation import embed_anchor_set
    from chexretrieve.anchors.files import find_anchor_sets

    try:
        sets = (
            [resolve_including_private(r, root) for r in refs]
            if refs
            else _newest(find_anchor_sets(root) + private_anchor_sets())
        )
        store, model = _open_store_and_encoder(db, encoder)
        rows = [embed_anchor_set(s, model, store, refresh) for s in track(sets, "embedding")]
    except ValueError as exc:
        _fail(str(exc))
    table = Table(title=f"anchor embeddings ({model.encoder_id})")
    for column in ("key", "n", "dim", "cache"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.key,
            str(row.matrix.shape[0]),
            str(row.matrix.shape[1]),
            "hit" if row.cached else "stored",
        )
    _console().print(table)


@anchors_app.command("impact")
def impact_command(
    old: str = typer.Argument(..., help="The set before the edit: path, id@version or id."),
    new: str = typer.Argument(..., help="The set after the edit."),
    encoder: str = _ENCODER,
    db: str | None = _DB,
    geometry: str = typer.Option(
        "softmax", "--geometry", help="Geometry used to rank (no posterior_*: no broad prior)."
    ),
    top_k: int = typer.Option(10, "--top-k", help="Ranked-list length compared."),
    show: int = typer.Option(5, "--show", help="Most-changed queries to list."),
    query_split: str = typer.Option("valid", "--query-split", help="Split of the query images."),
    key_split: str = typer.Option("train", "--key-split", help="Split of the key images."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    root: Path | None = _ROOT,
) -> None:
    """What an edit does on labelled data: AUPRC before/after and the most-changed top-k lists."""
    from chexretrieve.anchors.config import ImpactConfig
    from chexretrieve.anchors.curation import measure_impact
    from chexretrieve.anchors.files import resolve_anchor_set

    try:
        config = ImpactConfig(geometry=geometry, top_k=top_k, show_queries=show)
        before, after = resolve_anchor_set(old, root), resolve_anchor_set(new, root)
        store, model = _open_store_and_encoder(db, encoder)
        gallery = store.gallery(model.encoder_id)
        labels = store.labels_frame(gallery.image_ids).reindex(gallery.image_ids)
        column = labels[before.finding].to_numpy(dtype=float) if before.finding else None
        split = gallery.metadata["split"].astype(str).to_numpy()
        is_key, is_query = split == key_split, split == query_split
        if column is None or not is_key.any() or not is_query.any():
            raise ValueError(
                f"the store has {int(is_key.sum())} '{key_split}' and {int(is_query.sum())} "
                f"'{query_split}' images for {model.encoder_id}; impact needs both"
            )
        report = measure_impact(
            before,
            after,
            model,
            gallery.vectors[is_key],
            column[is_key],
            gallery.vectors[is_query],
            column[is_query],
            config,
            key_ids=gallery.image_ids[is_key],
            query_ids=gallery.image_ids[is_query],
            store=store,
        )
    except ValueError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(strict_json.dumps(report.to_dict(), indent=2))
    else:
        _render_impact(report)


@anchors_app.command("import-reports")
def import_reports_command(
    db: str | None = _DB,
    folder: Path | None = typer.Option(
        None, "--folder", help="Read the .txt reports under this folder instead of a store (with "
        "--db too: that store's identifiers are removed and its prior takes the set).",
    ),
    name: str = typer.Option("mimic", "--name", help="The set is broad/reports-NAME."),
    licence: str | None = typer.Option(
        None, "--licence", help="The reports' licence, recorded in the set (default: PhysioNet's)."
    ),
    redistributable: bool = typer.Option(
        False, "--redistributable", help="The licence allows sharing the sentences (else the set "
        "is marked no_redistribution and never leaves the private anchors folder).",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder to write to (default and, without --redistributable, the only "
        "choice: $CHEXRETRIEVE_PRIVATE_ANCHORS, else ~/.local/share/chexretrieve/private-anchors).",
    ),
) -> None:  # fmt: skip
    """Reports (the store's, or a folder's .txt) -> sentences, de-identified (the store's own
    identifiers exactly, then philter-lite's rules and ours), deduplicated -> a broad corpus that
    joins the posterior prior of the store it came from (elsewhere: name it with --prior)."""
    from chexretrieve.anchors.import_reports import (
        PHYSIONET_LICENCE,
        import_reports,
        store_identifiers,
    )
    from chexretrieve.anchors.report_corpus import folder_reports

    console = _console()
    identity, identifiers, unread = None, None, 0
    try:
        if folder is not None:
            texts, where = folder_reports(folder), str(folder)
        if db is not None or folder is None:
            from chexretrieve.store import StoreConfig, default_db_url, open_store

            config = StoreConfig(url=default_db_url(), create_if_missing=False)
            with open_store(db, config) as store, console.status("reading the archive's ids"):
                identity = store.identity
                identifiers, unread = store_identifiers(store)
                if folder is None:
                    texts, where = [t for _, t in store.report_texts()], store.label
            if not texts:
                raise ValueError(
                    f"the store {where} holds no reports; ingest MIMIC-CXR (its files/ .txt) or "
                    "a --reports CSV first, or give --folder"
                )
        with console.status(f"de-identifying {len(texts)} reports"):
            result = import_reports(
                texts, name, where=where, licence=licence or PHYSIONET_LICENCE,
                redistributable=redistributable, out=out, identifiers=identifiers, store=identity,
            )  # fmt: skip
    except ValueError as exc:
        _fail(str(exc))
    state = "unchanged (the newest version holds these sentences)" if result.unchanged else "wrote"
    console.print(
        f"{result.key}: {result.sentences} sentences from {result.reports} reports; {state} "
        f"{result.path}",
        soft_wrap=True, markup=False,
    )  # fmt: skip
    console.print(
        f"de-identified by {result.scrubber}"
        + (f"; {unread} DICOM files of the store could not be read" if unread else ""),
        soft_wrap=True, markup=False,
    )  # fmt: skip
    if result.restricted:
        console.print(
            "its licence forbids redistribution: never commit or share this file (it stays in the "
            "private anchors folder; the folder's .gitignore ignores it)",
            soft_wrap=True,
        )
    if not result.in_prior:
        console.print(
            f"not in any prior: set $CHEXRETRIEVE_PRIVATE_ANCHORS to {result.path.parent.parent} "
            f"and name it with --prior {result.key}",
            soft_wrap=True, markup=False,
        )  # fmt: skip
    elif identity is not None:
        console.print(
            f"the posterior prior of search, serve, the UI and eval on the store {identity} now "
            f"includes it; on other stores name it with --prior {result.key}",
            soft_wrap=True, markup=False,
        )  # fmt: skip
    else:
        console.print(
            f"it joins a posterior prior only where named: --prior {result.key}",
            soft_wrap=True, markup=False,
        )  # fmt: skip


def _newest(sets):
    newest = {}
    for s in sets:
        if s.id not in newest or s.version > newest[s.id].version:
            newest[s.id] = s
    return list(newest.values())


def _open_store_and_encoder(db: str | None, encoder: str):
    from chexretrieve.encoders import load_encoder
    from chexretrieve.store import StoreConfig, default_db_url, open_store

    # embed and impact read an ingested archive: a missing SQLite file is an error, never created
    existing_only = StoreConfig(url=default_db_url(), create_if_missing=False)
    return open_store(db, existing_only), load_encoder(encoder)


def _render_impact(report) -> None:
    from rich.table import Table

    console = _console()
    colour = "green" if report.delta >= 0 else "red"
    console.print(
        f"[bold]{report.finding}[/] {report.before} -> {report.after} ({report.geometry}): "
        f"AUPRC {report.auprc_before:.4f} -> {report.auprc_after:.4f} "
        f"([{colour}]{report.delta:+.4f}[/], 95 % interval {report.delta_low:+.4f} to "
        f"{report.delta_high:+.4f}); cosine {report.auprc_cosine:.4f}; "
        f"{report.n_queries} queries, {report.n_keys} keys ({report.n_relevant_keys} relevant); "
        f"mean top-{report.top_k} overlap {report.mean_overlap:.2f}"
    )
    table = Table(title=f"queries whose top-{report.top_k} changed most")
    for column in ("query", "overlap", "AP before", "AP after", "top before", "top after"):
        table.add_column(column)
    for c in report.most_changed:
        table.add_row(
            str(c.query),
            f"{c.overlap:.1f}",
            f"{c.ap_before:.3f}",
            f"{c.ap_after:.3f}",
            " ".join(map(str, c.top_before)),
            " ".join(map(str, c.top_after)),
        )
    console.print(table)
