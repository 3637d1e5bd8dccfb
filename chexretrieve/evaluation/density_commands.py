"""`chexretrieve eval density`: the archive density evaluated over encoders, worlds and EM seeds.

Writes ``OUT/report.md``, ``OUT/tables/*.csv``, ``OUT/figures/k_curve.png`` and
``OUT/manifest.json`` (:mod:`chexretrieve.evaluation.density_report`). Exit status 3 (after the
report is written) when a check that the evaluation can fail did fail: the in-distribution
control not near 0.5, or a known-answer world whose expected winner did not win.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import typer

from chexretrieve.evaluation.cli_options import command_line

#: exit status when a check failed (the report is still written)
CHECK_FAILED = 3


def density_command(
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Report folder (default eval/reports/density-phantom-DATE)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace a report already in --out (its README.md is kept)."
    ),
    encoder: list[str] = typer.Option(
        ["phantom"], "--encoder", help="Encoder spec; repeat for several trained encoders."
    ),
    phantom_seeds: str = typer.Option(
        "2,5,6", "--phantom-seeds", help="Phantom worlds (none an encoder was trained on)."
    ),
    em_seeds: str = typer.Option("0,1,2", "--em-seeds", help="EM (and split) seeds."),
    n_archive: int = typer.Option(1500, "--n-archive", help="Phantoms the density is fitted on."),
    n_heldout: int = typer.Option(600, "--n-heldout", help="Held-out phantoms (in distribution)."),
    n_control: int = typer.Option(200, "--n-control", help="In-distribution control phantoms."),
    n_shifted: int = typer.Option(
        50, "--n-shifted", help="Source phantoms per near shift and display error."
    ),
    candidates: str = typer.Option(
        "1,2,4,8,16,32,64",
        "--candidates",
        help="First mixture sizes K (extended until the held-out curve turns).",
    ),  # fmt: skip
    rare_max: int = typer.Option(
        2, "--rare-max", help="A combination is rare when at most this many archive images have it."
    ),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Embedding cache (default: eval/ under the cache root)."
    ),
    quiet: bool = typer.Option(False, "--quiet"),
) -> None:
    """OOD (near, display, far; control and known-answer checks), long tail, decomposition."""
    options = dict(locals())  # the manifest's provenance records them (staleness check)
    from rich.console import Console

    from chexretrieve.evaluation.cli_options import int_items

    console = Console(stderr=True, quiet=quiet)
    errors = Console(stderr=True)  # errors and failed checks are said even with --quiet
    out = out or Path("eval/reports") / f"density-phantom-{dt.date.today().isoformat()}"
    worlds_seeds = int_items(phantom_seeds, "--phantom-seeds")
    seeds = int_items(em_seeds, "--em-seeds")
    first = int_items(candidates, "--candidates")
    try:
        if not worlds_seeds or not seeds or not first:
            raise ValueError("--phantom-seeds, --em-seeds and --candidates need at least one value")
        checks = _run(
            out, force, encoder, worlds_seeds, seeds, first, rare_max, cache_dir,
            dict(n_archive=n_archive, n_heldout=n_heldout, n_control=n_control,
                 n_shifted=n_shifted), console, options,
        )  # fmt: skip
    except ValueError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(f"report: {out / 'report.md'}")
    outcome = {"control": checks["control"]["check"], "known-answer worlds": checks["known_answer"]}
    failed = [name for name, result in outcome.items() if result != "passed"]
    if failed:
        errors.print(f"[red]check failed:[/red] {', '.join(failed)} (see {out / 'report.md'})")
        raise typer.Exit(CHECK_FAILED)


def _run(out, force, specs, world_seeds, em_seeds, candidates, rare_max, cache_dir, sizes, console,
         options):  # fmt: skip
    from chexretrieve.encoders import load_encoder
    from chexretrieve.evaluation.cache_keys import (
        encoder_fingerprint,
        phantom_generator_fingerprint,
    )
    from chexretrieve.evaluation.config import DensityWorldConfig
    from chexretrieve.evaluation.density_data import DATA_VERSION
    from chexretrieve.evaluation.density_report import (
        code_version,
        prepare_folder,
        write_density_report,
    )
    from chexretrieve.evaluation.density_runs import run_density_evaluation
    from chexretrieve.evaluation.phantom_source import check_disjoint_world
    from chexretrieve.phantom import PhantomConfig
    from chexretrieve.phantom.config import RENDER_VERSION

    started = time.perf_counter()
    version = code_version()  # before anything runs: the checkout the figures come from
    prepare_folder(out, force)
    encoders = [load_encoder(spec) for spec in specs]
    ids = [e.encoder_id for e in encoders]
    if len(set(ids)) != len(ids):
        raise ValueError(f"the same encoder was given twice: {', '.join(ids)}")
    for model in encoders:
        for seed in world_seeds:
            check_disjoint_world(model, seed)
    worlds = [DensityWorldConfig(seed, **sizes) for seed in world_seeds]
    heard: list[str] = []

    def progress(what: str) -> None:
        heard.append(what)
        console.print(f"[dim]{what}[/dim]", markup=True)

    progress("fingerprinting encoders and the phantom generator (cache keys and the manifest)")
    prints = {e.encoder_id: encoder_fingerprint(e, texts=True) for e in encoders}
    generator = {
        str(w.seed): phantom_generator_fingerprint(w.seed, PhantomConfig(size=w.size))
        for w in worlds
    }
    results = run_density_evaluation(
        encoders, worlds, em_seeds, candidates, rare_max, cache_dir, progress,
        {k: {n: v for n, v in p.items() if n != "text_probe"} for k, p in prints.items()},
    )  # fmt: skip
    results.seconds["total"] = time.perf_counter() - started
    k_choice = results.frame("k_choice")
    manifest = {
        "title": "Archive density evaluation: phantom",
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "code_version": version,
        "render_version": RENDER_VERSION,
        "data_version": DATA_VERSION,
        "generator_fingerprints": generator,
        "encoders": [
            {"spec": s, **prints[e.encoder_id]} for s, e in zip(specs, encoders, strict=True)
        ],
        "anchor_sets": results.anchor_hashes,
        "priors": [],  # no prior anchor set enters the density evaluation
        "external_images": results.external_digest,
        "settings": {
            "worlds": list(world_seeds),
            "em_seeds": list(em_seeds),
            "runs": len(encoders) * len(worlds) * len(em_seeds),
            **sizes,
            "size": worlds[0].size,
            "candidates": list(candidates),
            "rare_max": rare_max,
            "external": _external_text(results),
        },
        "chosen_K": {
            f"{r['encoder']} world {r['world']}": int(r["chosen K"])
            for r in k_choice.to_dict("records")
        },
        # True when every embedding was read from the cache (nothing drawn or embedded)
        "embeddings_cached": not any("(once" in h for h in heard),
        "seconds": {k: round(v, 1) for k, v in results.seconds.items()},
        "load_average": round(os.getloadavg()[0], 1),
    }
    from chexretrieve.evaluation.provenance import report_provenance

    # provenance.py's common block: what the staleness check compares with the checkout
    manifest["provenance"] = report_provenance(
        "density", encoders=list(zip(specs, ids, strict=True)), worlds=world_seeds, options=options
    )
    return write_density_report(out, command_line(), results, manifest)


def _external_text(results) -> str:
    ood = results.frame("ood")
    counts = ood.drop_duplicates("group").set_index("group")
    parts = []
    for group in ("far: other body parts", "far: photographs", "far: synthetic"):
        if group in counts.index:
            parts.append(f"{int(counts.loc[group, 'n'])} {group.removeprefix('far: ')}")
    return ", ".join(parts) + " (RG1, a real chest film, reported apart)"
