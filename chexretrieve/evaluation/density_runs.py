"""Every (encoder, world, EM seed) run of the density evaluation, collected into long tables.

For each encoder and phantom world, K is chosen once (first EM seed) by held-out likelihood over a
range extended until the curve turns (:func:`select_k`); every EM seed then refits the mixture
with that K on the archive (and on its 80 % split, for the reference scores). Each run measures
OOD per group, the deployed rule's flag rates, the matched long tail, and the decomposition; the
known-answer worlds run once per EM seed. Every table carries ``encoder``, ``world`` and
``EM seed`` columns, so the summaries (:mod:`chexretrieve.evaluation.density_summary`) report
mean and range over all runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from chexretrieve.evaluation.density_data import (
    DensityWorldConfig,
    external_embeddings,
    world_embeddings,
)
from chexretrieve.evaluation.density_decomposition import (
    component_names,
    decomposition_rows,
    naming_summary,
    polar_anchors,
    purity_rows,
)
from chexretrieve.evaluation.density_known import check_winners, known_answer_rows
from chexretrieve.evaluation.density_models import fit_density_models
from chexretrieve.evaluation.density_ood import flag_rows, ood_rows
from chexretrieve.evaluation.density_tail import long_tail_rows


@dataclass
class DensityResults:
    tables: dict[str, list[dict]] = field(default_factory=dict)
    # the component names of the first run (first encoder, world and seed)
    names: pd.DataFrame | None = None
    anchor_hashes: dict[str, str] = field(default_factory=dict)
    external_digest: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, table: str, rows, **tags) -> None:
        self.tables.setdefault(table, []).extend({**tags, **row} for row in rows)

    def frame(self, table: str) -> pd.DataFrame:
        return pd.DataFrame(self.tables.get(table, []))


def run_density_evaluation(
    encoders: Sequence,
    worlds: Sequence[DensityWorldConfig],
    em_seeds: Sequence[int],
    candidates: Sequence[int],
    rare_max: int = 2,
    cache_dir=None,
    progress: Callable[[str], None] | None = None,
    prints: dict | None = None,
) -> DensityResults:
    say = progress or (lambda what: None)
    results = DensityResults()
    started = time.perf_counter()
    externals, results.external_digest = external_embeddings(encoders, cache_dir, say, prints)
    anchors = {}
    for encoder in encoders:
        anchors[encoder.encoder_id], results.anchor_hashes = polar_anchors(encoder, cache_dir)
    results.seconds["embeddings"] = time.perf_counter() - started
    fitting = 0.0
    for settings in worlds:
        started = time.perf_counter()
        embedded = world_embeddings(encoders, settings, cache_dir, say, prints)
        results.seconds["embeddings"] += time.perf_counter() - started
        started = time.perf_counter()
        for encoder, world, external in zip(encoders, embedded, externals, strict=True):
            _one_encoder_world(results, world, external, anchors[encoder.encoder_id],
                               em_seeds, candidates, rare_max, say)  # fmt: skip
        fitting += time.perf_counter() - started
    started = time.perf_counter()
    for seed in em_seeds:
        say(f"known-answer worlds, EM seed {seed}")
        rows = known_answer_rows(seed, candidates)
        results.add("known_answer", rows)
        results.add("known_answer_checks", check_winners(rows))
    results.seconds["fitting and scoring"] = fitting + time.perf_counter() - started
    return results


def _one_encoder_world(results, world, external, anchors, em_seeds, candidates, rare_max, say):
    chosen = None
    for seed in em_seeds:
        tags = {"encoder": world.encoder_id, "world": world.seed, "EM seed": seed}
        say(f"{world.encoder_id}, world {world.seed}, EM seed {seed}: fitting and scoring")
        models = fit_density_models(world.archive, candidates, seed, n_components=chosen)
        if chosen is None:
            chosen = models.n_components
            selection = models.selection
            curve = [
                {"K": k, "held-out mean log-likelihood": v} for k, v in selection.curve.items()
            ]
            results.add("k_curve", curve, encoder=world.encoder_id, world=world.seed)
            results.add(
                "k_choice",
                [
                    {
                        "chosen K": chosen,
                        "curve": selection.shape,
                        "largest K tried": max(selection.curve),
                    }
                ],
                encoder=world.encoder_id,
                world=world.seed,
            )
        auroc_rows, difference_rows = ood_rows(world, external, models, seed)
        results.add("ood", auroc_rows, **tags)
        results.add("ood_difference", difference_rows, **tags)
        results.add("flags", flag_rows(world, external, models), **tags)
        results.add("long_tail", long_tail_rows(world, models, rare_max, seed), **tags)
        results.add("decomposition", decomposition_rows(world, models, seed), **tags)
        results.add("purity", purity_rows(world, models, seed), **tags)
        results.add("naming", [naming_summary(world, models, anchors, seed)], **tags)
        if results.names is None:
            results.names = component_names(world, models, anchors)
