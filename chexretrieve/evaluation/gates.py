"""Gates a phantom encoder must pass before its retrieval report means something.

Measured on the evaluation world (a world seed the encoder never trained on), with the report's
protocol (keys = training split with report-derived labels, queries = validation split with true
labels):

* zero-shot AUROC per finding with the prompt pair ("{}", "no {}") against the truth of every
  image of the world; the mean should lie in 0.80-0.92 (published CheXzero-class models), not above;
* prompt-direction AP: every key ranked by one query-independent text direction
  t("there is {}") - t("there is no {}") (and the evaluation pair's), beside the best image-to-image
  geometry's mean AUPRC; the direction must not dominate;
* effective dimension: principal components of the image embeddings for 95% of their variance;
* inv_t x the spread of image-anchor cosines (``temperature.anchor_cosine_spread``): how sharp the
  softmax anchor distribution is.

SIMULATION: these say how the phantom world and the phantom encoder behave, nothing about patients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score, roc_auc_score

from chexretrieve.evaluation.config import ProtocolConfig, RetrievalEvalConfig
from chexretrieve.evaluation.inputs import EncodedView
from chexretrieve.evaluation.protocol import LabelledArchive, finding_task
from chexretrieve.evaluation.temperature import anchor_cosine_spread
from chexretrieve.findings import FINDINGS

#: the published range of CheXzero-class zero-shot mean AUROC the phantom encoder should land in
AUROC_TARGET = (0.80, 0.92)
#: prompt pairs whose difference is the query-independent direction ({} = finding in lower case)
DIRECTION_PAIRS = (("there is {}", "there is no {}"), ("{}", "no {}"))
#: image-to-image geometries the prompt direction is compared with
IMAGE_GEOMETRIES = ("cosine", "iti", "softmax", "gaussian")


@dataclass
class Gates:
    """The gate measurements of one encoder on one evaluation world."""

    encoder_id: str
    world: str  # which world and images were measured
    zero_shot: pd.DataFrame  # finding, auroc_truth, positives (truth over every image)
    direction_ap: pd.DataFrame  # finding x direction pair: AP of the key ranking
    image_ap: pd.DataFrame  # finding x geometry: mean per-query AP (report protocol)
    effective_dimension: int  # components for 95% of the image embeddings' variance
    embed_dim: int
    inv_temperature: float
    cosine_spread: float  # anchor_cosine_spread
    notes: list[str] = field(default_factory=list)

    @property
    def mean_auroc(self) -> float:
        return float(self.zero_shot["auroc_truth"].mean())

    @property
    def best_image_geometry(self) -> tuple[str, float]:
        means = self.image_ap.mean()
        return str(means.idxmax()), float(means.max())

    def checks(self) -> list[tuple[str, bool, str]]:
        """(gate, passed, the numbers) for each gate with a pass rule."""
        low, high = AUROC_TARGET
        mean = self.mean_auroc
        geometry, best = self.best_image_geometry
        direction = float(self.direction_ap.mean().max())
        return [
            (
                "zero-shot AUROC mean in the CheXzero range",
                low <= mean <= high,
                f"{mean:.3f} (target {low:.2f}-{high:.2f})",
            ),
            (
                "prompt direction does not dominate image-to-image retrieval",
                direction <= best,
                f"best prompt-direction AP {direction:.3f} vs best image-to-image {best:.3f} "
                f"({geometry})",
            ),
        ]


def effective_dimension(embeddings: np.ndarray, share: float = 0.95) -> int:
    """Principal components needed for ``share`` of the total variance of the rows."""
    centred = np.asarray(embeddings, dtype=np.float64)
    centred = centred - centred.mean(axis=0)
    values = np.linalg.svd(centred, compute_uv=False) ** 2
    if values.sum() <= 0:
        return 0
    cumulative = np.cumsum(values) / values.sum()
    return int(np.searchsorted(cumulative, share - 1e-12) + 1)


def zero_shot_table(scores_by_finding: dict[str, np.ndarray], truth: pd.DataFrame) -> pd.DataFrame:
    """AUROC per finding of the zero-shot scores against ``truth`` (columns "truth: <finding>")."""
    rows = []
    for finding, score in scores_by_finding.items():
        present = truth[f"truth: {finding}"].to_numpy(dtype=float) > 0.5
        auroc = float(roc_auc_score(present, score)) if 0 < present.sum() < len(present) else np.nan
        rows.append({"finding": finding, "auroc_truth": auroc, "positives": int(present.sum())})
    return pd.DataFrame(rows).set_index("finding")


def direction_average_precision(
    archive: LabelledArchive,
    embeddings: np.ndarray,
    directions: dict[str, np.ndarray],
    protocol: ProtocolConfig,
) -> dict[str, float]:
    """Per finding, AP of the keys ranked by ``embeddings @ directions[finding]`` with the
    protocol's relevance; the ranking is the same for every query, so this is every query's AP."""
    out = {}
    for finding, direction in directions.items():
        task = finding_task(archive, finding, protocol)
        if task.n_queries == 0 or task.key_class.sum() == 0:
            continue
        scores = embeddings[task.key_index] @ np.asarray(direction, dtype=np.float64)
        out[finding] = float(average_precision_score(task.key_class, scores))
    return out


def prompt_directions(encoder, pair: tuple[str, str], findings: Sequence[str]) -> dict:
    """finding -> unit vector t(positive) - t(negative) in the encoder's joint space."""
    positive, negative = pair
    names = [f.lower() for f in findings]
    texts = encoder.embed_texts(
        [positive.format(n) for n in names] + [negative.format(n) for n in names]
    )
    difference = texts[: len(names)] - texts[len(names) :]
    difference /= np.linalg.norm(difference, axis=1, keepdims=True)
    return dict(zip(findings, difference, strict=True))


def measure_gates(
    encoder,
    archive: LabelledArchive,
    view: EncodedView,
    world: str,
    protocol: ProtocolConfig | None = None,
    show_progress: bool = False,
) -> Gates:
    """Every gate of ``encoder`` on an evaluation archive and its embedded view."""
    from chexretrieve.evaluation.runner import run_retrieval
    from chexretrieve.phantom.zero_shot import zero_shot_scores

    protocol = protocol or ProtocolConfig()
    findings = [f for f in FINDINGS if f"truth: {f}" in archive.labels.columns]
    scores = zero_shot_scores(encoder, view.embeddings)
    zero_shot = zero_shot_table({f: scores[f] for f in findings}, archive.labels)
    direction_ap = pd.DataFrame(
        {
            f'"{p}" - "{n}"': direction_average_precision(
                archive, view.embeddings, prompt_directions(encoder, (p, n), findings), protocol
            )
            for p, n in DIRECTION_PAIRS
        }
    )
    config = RetrievalEvalConfig(
        findings=tuple(findings), geometries=IMAGE_GEOMETRIES, protocol=protocol
    )
    run = run_retrieval(archive, [view], config, show_progress=show_progress)
    image_ap = run.per_query.groupby(["finding", "geometry"])["ap"].mean().unstack("geometry")
    return Gates(
        encoder_id=encoder.encoder_id,
        world=world,
        zero_shot=zero_shot,
        direction_ap=direction_ap,
        image_ap=image_ap.reindex(direction_ap.index),
        effective_dimension=effective_dimension(view.embeddings),
        embed_dim=int(view.embeddings.shape[1]),
        inv_temperature=float(view.inv_temperature),
        cosine_spread=anchor_cosine_spread(view, findings),
    )


def gates_markdown(gates: Gates) -> str:
    """The gates as a Markdown section (what eval/phantom_zero_shot.md shows)."""
    lines = [
        f"Measured on {gates.world}, encoder `{gates.encoder_id}`.",
        "",
        "| gate | passed | measured |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {'yes' if ok else 'NO'} | {text} |" for name, ok, text in gates.checks()]
    lines += [
        f"| effective dimension (components for 95% of the image-embedding variance) | - | "
        f"{gates.effective_dimension} of {gates.embed_dim} |",
        f"| inv_t x spread of image-anchor cosines | - | {gates.inv_temperature:.1f} x "
        f"{gates.cosine_spread:.4f} = {gates.inv_temperature * gates.cosine_spread:.2f} |",
        "",
        "Per finding: zero-shot AUROC against the truth of every image of the world, AP of the "
        "keys ranked by one prompt direction, and mean per-query AP of the image-to-image "
        "geometries (keys = training split, queries = validation images truly positive):",
        "",
    ]
    zero_shot = gates.zero_shot.rename(
        columns={"auroc_truth": "zero-shot AUROC", "positives": "truly present"}
    )
    directions = gates.direction_ap.rename(columns=lambda c: f"direction {c} AP")
    images = gates.image_ap.rename(columns=lambda c: f"{c} AP")
    table = zero_shot.join(directions).join(images)
    header = ["finding", *map(str, table.columns)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(column: str, value) -> str:
        if column == "truly present":
            return str(int(value))
        return "n/a" if pd.isna(value) else f"{float(value):.3f}"

    for finding, row in table.iterrows():
        lines.append(f"| {finding} | " + " | ".join(cell(c, row[c]) for c in table.columns) + " |")
    means = table.mean(numeric_only=True)
    lines.append(
        "| **mean** | "
        + " | ".join("" if c == "truly present" else f"**{means[c]:.3f}**" for c in table.columns)
        + " |"
    )
    lines += [
        "",
        "n/a: the finding has no truly positive validation query or no positive key in this world "
        "(its AUROC still uses every image).",
    ]
    return "\n".join(lines) + "\n"


def evaluate_gates(
    weights: Sequence[str | None],
    seed: int = 0,
    n_images: int = 3000,
    anchors_root: str | None = None,
    cache_dir: str | None = None,
    device: str = "auto",
    show_progress: bool = True,
) -> list[tuple[object, Gates]]:
    """Load each phantom weights file (None: the bundled default), generate the evaluation world
    ``seed`` once and embed it with every encoder exactly as ``chexretrieve eval retrieval`` does
    (same embedding cache; None: the cache root's eval/ folder), and measure each one's gates."""
    from chexretrieve.encoders import EncoderConfig, load_encoder
    from chexretrieve.evaluation.config import PhantomSourceConfig
    from chexretrieve.evaluation.phantom_source import phantom_source
    from chexretrieve.evaluation.sources import load_anchor_texts

    specs = ["phantom" if w is None else f"phantom:{w}" for w in weights]
    encoder_config = EncoderConfig(device=device)
    encoders = [load_encoder(spec, encoder_config) for spec in specs]
    texts = load_anchor_texts(anchors_root, FINDINGS)
    source = PhantomSourceConfig(n_images=n_images, seed=seed, cache_dir=cache_dir)
    archive, views = phantom_source(
        source, texts, encoder_config=encoder_config, show_progress=show_progress,
        encoders=encoders,
    )  # fmt: skip
    n_valid = int((archive.splits == "valid").sum())
    world = (
        f"phantom world seed {seed}, cases 0-{n_images - 1} ({n_images - n_valid} training-split "
        f"keys, {n_valid} validation queries), the archive `chexretrieve eval retrieval "
        f"--phantom-seed {seed} --phantom-n {n_images}` evaluates"
    )
    return [
        (encoder, measure_gates(encoder, archive, view, world, show_progress=show_progress))
        for encoder, view in zip(encoders, views, strict=True)
    ]


def _encoder_lines(encoder) -> list[str]:
    from chexretrieve.phantom.zero_shot import describe_encoder, generator_status, supervision_note

    provenance = getattr(encoder, "provenance", {}) or {}
    trained = provenance.get("generator", {})
    return [
        f"- encoder: {describe_encoder(encoder)}",
        f"- trained on: world seed {trained.get('seed', '?')}, training split, "
        f"{trained.get('size', '?')} px phantoms, prevalence {trained.get('prevalence', '?')}; "
        "the evaluation world below is another seed, so every image in it is unseen",
        f"- supervision: {supervision_note(provenance)}",
        f"- generator: {generator_status(provenance)}",
    ]


_PROMPT_LINE = (
    '- zero-shot score: softmax over the prompt pair ("{}", "no {}") of the positive prompt\'s '
    "logit, the finding's name in lower case; AUROC against the generator's truth"
)


def gates_summary(measured: Sequence[tuple[object, Gates]]) -> str:
    """One row per encoder, then mean [min, max] over the encoders, as a Markdown table."""
    rows = []
    for encoder, gates in measured:
        _, best = gates.best_image_geometry
        direction = float(gates.direction_ap.mean().max())
        seed = ((getattr(encoder, "provenance", {}) or {}).get("generator") or {}).get("seed", "?")
        rows.append(
            (
                f"`{gates.encoder_id}` (training world {seed})",
                gates.mean_auroc,
                direction,
                best,
                best - direction,
                all(ok for _, ok, _ in gates.checks()),
                gates.effective_dimension,
                gates.inv_temperature * gates.cosine_spread,
            )
        )
    lines = [
        "| encoder | zero-shot AUROC mean | best prompt-direction AP | best image-to-image AP | "
        "margin (image − direction) | all gates pass | effective dimension | inv_t x spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, auroc, direction, best, margin, ok, dim, sharp in rows:
        lines.append(
            f"| {name} | {auroc:.3f} | {direction:.3f} | {best:.3f} | {margin:+.3f} | "
            f"{'yes' if ok else 'NO'} | {dim} | {sharp:.2f} |"
        )
    if len(rows) > 1:
        columns = list(zip(*[r[1:5] for r in rows], strict=True))
        cells = [
            f"{np.mean(c):{'+' if i == 3 else ''}.3f} [{min(c):{'+' if i == 3 else ''}.3f}, "
            f"{max(c):{'+' if i == 3 else ''}.3f}]"
            for i, c in enumerate(columns)
        ]
        passed = sum(r[5] for r in rows)
        lines.append(
            f"| **mean [min, max]** | {' | '.join(cells)} | {passed} of {len(rows)} | "
            f"{np.mean([r[6] for r in rows]):.1f} | {np.mean([r[7] for r in rows]):.2f} |"
        )
    return "\n".join(lines) + "\n"


def gates_page(measured: Sequence[tuple[object, Gates]], command: str) -> str:
    """eval/phantom_zero_shot.md: what was measured, on what, from which weights, and the gates
    of every encoder (one section each, after a summary when there are several)."""
    lines = [
        "# Phantom encoder: zero-shot AUROC and the evaluation gates",
        "",
        "SIMULATION: synthetic phantoms scored by a model trained on synthetic phantoms; these "
        "figures say nothing about real radiographs.",
        "",
    ]
    if len(measured) == 1:
        ((encoder, gates),) = measured
        lines += [
            *_encoder_lines(encoder),
            _PROMPT_LINE,
            f"- reproduce: `{command}`",
            "",
            "## Gates",
            "",
            gates_markdown(gates),
        ]
        return "\n".join(lines)
    lines += [
        f"{len(measured)} independently trained encoders, each measured on the same evaluation "
        "world.",
        "",
        _PROMPT_LINE,
        f"- reproduce: `{command}`",
        "",
        "## Summary",
        "",
        gates_summary(measured),
    ]
    for encoder, gates in measured:
        lines += [f"## Encoder `{gates.encoder_id}`", "", *_encoder_lines(encoder), ""]
        lines += [gates_markdown(gates)]
    return "\n".join(lines)
