"""The density report folder: ``report.md``, ``tables/*.csv``, ``figures/k_curve.png`` and
``manifest.json`` (everything the report depends on, for the staleness check of the committed
reports: code version, ``RENDER_VERSION``, generator fingerprints, encoder weight hashes and probe
fingerprints, anchor-set hashes, the external images' digest, settings, command, checks).

A folder that already holds a report is refused unless ``force``; with it, the generated files
are replaced (the old ``tables/`` and ``figures/`` removed first, so nothing stale lingers) and
any hand-written ``README.md`` is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from chexretrieve import strict_json
from chexretrieve.evaluation.density_claims import (
    checks_text,
    decomposition_claim,
    ood_claim,
    tail_claim,
)
from chexretrieve.evaluation.density_summary import (
    choose_ood_model,
    control_check,
    difference_table,
    flag_table,
    group_table,
    headline_table,
    mean_table,
    per_run_intervals,
    spread,
)

#: components listed by name in report.md (tables/runs_component_names.csv has all)
NAMED_COMPONENTS = 20
#: the files a report run writes (README.md is never touched)
GENERATED = ("report.md", "manifest.json", "tables", "figures")


def code_version() -> dict:
    """The package version and, in a git checkout, the commit and whether the tree is dirty."""
    from chexretrieve import __version__

    root = Path(__file__).resolve().parents[2]
    out = {"package": __version__, "git_commit": None, "git_dirty": None}
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
            check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
        out.update(git_commit=commit, git_dirty=bool(status.strip()))
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def prepare_folder(out: Path, force: bool) -> None:
    """Refuse a folder that holds a report unless ``force``; with it, remove the old outputs."""
    out = Path(out)
    if (out / "report.md").exists() or (out / "manifest.json").exists():
        if not force:
            raise ValueError(
                f"{out} already holds a report; pass --force to replace it (its README.md is "
                "kept) or choose another --out"
            )
        for name in GENERATED:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _markdown(frame: pd.DataFrame) -> str:
    """A pipe table: index columns first, floats to 3 decimals, NaN blank."""
    flat = frame.reset_index() if frame.index.name or frame.index.nlevels > 1 else frame
    if isinstance(flat.columns, pd.MultiIndex):
        flat.columns = [" ".join(str(p) for p in c if str(p)) for c in flat.columns]

    def text(value) -> str:
        if isinstance(value, float):
            return "" if value != value else f"{value:.3f}"
        return str(value).replace("|", "/")

    header = [str(c) for c in flat.columns]
    rows = [[text(v) for v in row] for row in flat.itertuples(index=False)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _k_curve_figure(curve: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for (encoder, world), part in curve.groupby(["encoder", "world"], sort=False):
        axis.plot(part["K"], part["held-out mean log-likelihood"], marker="o",
                  label=f"{encoder}, world {world}")  # fmt: skip
    axis.set_xscale("log", base=2)
    axis.set_xlabel("components K")
    axis.set_ylabel("held-out mean log-likelihood (nats)")
    axis.set_title("vMF mixture: component count on the archive's 20 % split")
    axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def _shifts_figure(world_seed: int, size: int, path: Path) -> None:
    """One source phantom under every near shift and display error (what the groups hold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from chexretrieve.evaluation.config import DensityWorldConfig
    from chexretrieve.evaluation.density_data import world_items
    from chexretrieve.phantom import PhantomConfig, generate_case

    probe = DensityWorldConfig(world_seed, 1, 1, 1, 1, size)
    items = [(g, k, i, image) for g, k, i, image, _ in world_items(probe)]
    shifted = [(f"{g}: {k}", i, image) for g, k, i, image in items if g in ("near", "display")]
    source = generate_case(world_seed, shifted[0][1], PhantomConfig(size=size)).image
    shown = [("source phantom", source)] + [(title, image) for title, _, image in shifted]
    columns = 5
    rows = -(-len(shown) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(2.2 * columns, 2.4 * rows), dpi=80)
    for axis in axes.ravel():
        axis.axis("off")
    for axis, (title, image) in zip(axes.ravel(), shown, strict=False):
        axis.imshow(image, cmap="gray", vmin=0, vmax=1)
        axis.set_title(title, fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def summary_tables(results) -> dict[str, pd.DataFrame]:
    """The report's tables (summaries first, then every long table as run)."""
    ood, differences = results.frame("ood"), results.frame("ood_difference")
    curve = results.frame("k_curve")
    curve = curve.assign(run=[f"{e}, world {w}" for e, w in zip(curve["encoder"], curve["world"],
                                                                 strict=True)])  # fmt: skip
    k_table = curve.pivot_table(index="K", columns="run", values="held-out mean log-likelihood")
    k_table = k_table[list(dict.fromkeys(curve["run"]))]
    tail = results.frame("long_tail")
    tail_summary = mean_table(tail, "model", ["matched AUROC", "lower", "upper",
                                             "MovMF - Gaussian", "MovMF - Gaussian lower",
                                             "MovMF - Gaussian upper",
                                             "unmatched AUROC (rare vs 5 most common)",
                                             "n rare (matched strata)"])  # fmt: skip
    decomposition = results.frame("decomposition")
    parts = mean_table(
        decomposition, ["cloud", "responsibilities"],
        ["T", "mean entropy (nats)", "effective components exp(H)", "components for 90 %",
         "share with top > 0.99", "max entropy log K"],
    )  # fmt: skip
    return {
        "headline": headline_table(ood),
        "ood_by_group": group_table(ood),
        "movmf_minus_gaussian": difference_table(differences),
        "intervals_first_seed": per_run_intervals(ood),
        "deployed_rule": flag_table(results.frame("flags")),
        "k_curve": k_table,
        "k_choice": results.frame("k_choice").set_index(["encoder", "world"]),
        "long_tail_matched": tail_summary,
        "decomposition": parts,
        "purity": mean_table(
            results.frame("purity"),
            "assignment",
            ["finding purity", "base rate purity", "NMI with finding combination"],
        ),  # fmt: skip
        "naming": mean_table(
            results.frame("naming"),
            lambda _: "all runs",
            [
                c
                for c in results.frame("naming").columns
                if c not in ("encoder", "world", "EM seed")
            ],
        ),  # fmt: skip
        "component_names_first_run": (
            results.names.head(NAMED_COMPONENTS) if results.names is not None else pd.DataFrame()
        ),
        "known_answer_checks": results.frame("known_answer_checks").set_index(["world", "EM seed"]),
    }


TITLES = {
    "headline": "Headline: OOD AUROC, mean [min, max] over all runs",
    "ood_by_group": "OOD AUROC per group and model, mean [min, max] over runs",
    "movmf_minus_gaussian": "MovMF − Gaussian AUROC per group (per-run bootstrap intervals)",
    "intervals_first_seed": "AUROC with its 95 % bootstrap interval, per encoder and world "
    "(first EM seed)",
    "deployed_rule": "The deployed rule: share flagged below the p-th percentile of the "
    "reference (mean [min, max] over runs)",
    "k_curve": "Component count: held-out mean log-likelihood per K (nats; 80/20 split)",
    "k_choice": "The chosen K and the shape of the curve",
    "long_tail_matched": "Long tail matched for abnormality (mean [min, max] over runs)",
    "decomposition": "Decomposition: responsibilities on held-out images, the archive vs a "
    "structureless control",
    "purity": "Top-component purity against the finding combination",
    "naming": "Naming components: dominant labels (No Finding included) and anchors of both "
    "polarities",
    "component_names_first_run": f"The {NAMED_COMPONENTS} heaviest components of the first run",
    "known_answer_checks": "Known-answer worlds: the expected winner, checked",
}


def write_density_report(out: Path, command: str, results, manifest: dict) -> dict:
    """Write the folder; returns the manifest's ``checks`` (control, known answers, model)."""
    out = Path(out)
    tables = summary_tables(results)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    for name in results.tables:
        results.frame(name).to_csv(out / "tables" / f"runs_{name}.csv", index=False)
    if results.names is not None:
        results.names.to_csv(out / "tables" / "runs_component_names.csv")
    for name, frame in tables.items():
        frame.to_csv(out / "tables" / f"{name}.csv")
    _k_curve_figure(results.frame("k_curve"), out / "figures" / "k_curve.png")
    settings = manifest["settings"]
    _shifts_figure(settings["worlds"][0], settings["size"], out / "figures" / "shifts.png")
    ood, differences = results.frame("ood"), results.frame("ood_difference")
    control = control_check(ood)
    known = results.frame("known_answer_checks")
    model = choose_ood_model(ood, differences)
    checks = {
        "control": control,
        "known_answer": "passed" if (known["check"] == "passed").all() else "FAILED",
        "ood_model": model,
    }
    manifest = {**manifest, "command": command, "checks": checks,
                "tables": sorted(f"{n}.csv" for n in tables)}  # fmt: skip
    naming = results.frame("naming")
    lines = _preamble(command, manifest)
    lines += ["## Checks that this evaluation can fail", "", *checks_text(control, known), ""]
    lines += ["## The seed's claims, checked here", ""]
    lines += ood_claim(ood, differences)
    lines += tail_claim(results.frame("long_tail"))
    lines += decomposition_claim(
        results.frame("decomposition"), results.frame("purity"), naming if len(naming) else None
    )
    lines += ["", "## The deployed OOD model and threshold", "", _model_text(model, results), ""]
    for name, frame in tables.items():
        lines += [f"## {TITLES[name]}", "", _markdown(frame), ""]
        if name == "k_curve":
            lines += ["![held-out log-likelihood per K](figures/k_curve.png)", ""]
        if name == "ood_by_group":
            lines += [
                "One phantom under each near shift and display error (drawn by the same code "
                "at the report's image size):",
                "",
                "![near shifts and display errors](figures/shifts.png)",
                "",
            ]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "manifest.json").write_text(strict_json.dumps(manifest, indent=2, default=str) + "\n")
    return checks


def _preamble(command: str, manifest: dict) -> list[str]:
    settings = manifest["settings"]
    encoders = ", ".join(f"`{e['id']}`" for e in manifest["encoders"])
    seconds = manifest.get("seconds", {})
    return [
        "# Archive density on the phantom world: OOD, long tail, decomposition",
        "",
        f"Command: `{command}`",
        "",
        f"Runs: {len(manifest['encoders'])} encoder(s) ({encoders}) × phantom worlds "
        f"{settings['worlds']} × EM seeds {settings['em_seeds']} = {settings['runs']} runs. Per "
        f"world: {settings['n_archive']} archive phantoms (every model is fitted on these only), "
        f"{settings['n_heldout']} held-out phantoms (the in-distribution negatives), "
        f"{settings['n_control']} control phantoms, {settings['n_shifted']} source phantoms under "
        f"each near shift and display error; external images: {settings['external']}. "
        f"K is chosen per encoder and world on the held-out likelihood, starting from "
        f"{settings['candidates']} and extended until the curve turns. `RENDER_VERSION` "
        f"{manifest['render_version']}. Run time {seconds.get('total', '?')} s on "
        f"{os.cpu_count()} cores at load average {manifest.get('load_average', '?')} "
        f"(embeddings {seconds.get('embeddings', '?')} s"
        + (", read from the cache" if manifest.get("embeddings_cached") else "")
        + f"; fitting and scoring {seconds.get('fitting and scoring', '?')} s).",
        "",
        "SIMULATION: synthetic phantoms and small phantom-trained image towers; these figures "
        "say nothing about clinical performance or about CLIP embeddings of real films.",
        "",
    ]


def _model_text(model: dict, results) -> str:
    near = model["near AUROC mean"]
    far = model["far AUROC mean"]
    flags = results.frame("flags")
    text = (
        f"Near shifts, mean AUROC over {model['runs']} runs: MovMF {near['movmf']:.3f}, Gaussian "
        f"{near['gaussian']:.3f} (the Gaussian ahead in "
        f"{100 * model['share of runs Gaussian ahead on near shifts']:.0f} % of runs); far "
        f"images: MovMF {far['movmf']:.3f}, Gaussian {far['gaussian']:.3f}. "
    )
    if model["decided"]:
        text += f'**The evidence supports `DensityConfig.ood_model = "{model["model"]}"`.** '
    else:
        text += "**The evidence does not decide between them.** "
    for name in ("movmf", "gaussian"):
        part = flags[(flags["model"] == name) & (flags["percentile"] == 0.5)]
        if part.empty:
            continue
        text += (
            f"With the deployed threshold (below the 0.5th percentile of the held-out reference) "
            f"{name} flags {spread(100 * part['held-out flagged'])} % of held-out phantoms, "
            f"{spread(100 * part['near (all) flagged'])} % of near-shifted images, "
            f"{spread(100 * part['far (all) flagged'])} % of far images, and the real chest film "
            f"RG1 in {int((part['RG1 flagged'] > 0.5).sum())} of {len(part)} runs. "
        )
    return text
