"""Ranking and retrieval quality of float16 storage against float32 on a labelled archive.

The archive is the evaluation's phantom world (``chexretrieve.evaluation.phantom_source``: world
seed 0, the bundled phantom encoder, 128-d embeddings; cached by ``chexretrieve phantom gates`` and
``eval retrieval``), its anchors the newest version of each finding's first anchor variant (the
broad corpus as the posterior prior). Two search services hold the same gallery, one with
``SearchConfig.storage_dtype = "float32"``, one with ``"float16"`` (embeddings and cached features
rounded). Queries and relevance follow the evaluation protocol (``finding_task``: validation images
positive for the finding query the training images whose label is known). Per geometry it prints

* top-10 overlap: |top 10 of float16 ∩ top 10 of float32| / 10 over the whole gallery, the search
  API's own ranking (``SearchService.search``), mean over every query of every finding;
* AP (AUPRC) of float32 and of float16 over the keys (``SearchService.gallery_scores``), mean over
  queries then findings, and the mean and largest absolute per-query AP change.

    .venv/bin/python benchmarks/storage_precision.py
    .venv/bin/python benchmarks/storage_precision.py --images 3000 --geometries softmax gaussian

SIMULATION: phantom figures say how much float16 moves rankings, not how well the method works.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.evaluation.config import PhantomSourceConfig, ProtocolConfig
from chexretrieve.evaluation.phantom_source import phantom_source
from chexretrieve.evaluation.protocol import finding_task
from chexretrieve.evaluation.sources import load_anchor_texts
from chexretrieve.findings import FINDINGS
from chexretrieve.metrics import average_precision_rows
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.features import GEOMETRY_CHOICES
from chexretrieve.search.gallery import Gallery
from chexretrieve.search.service import AnchorSetRef, SearchRequest, SearchService


class BankAnchors:
    """Each finding's first anchor variant and the broad corpus, from the evaluation's bank."""

    def __init__(self, texts, bank):
        self.sets = {}
        for finding, variants in bank.findings.items():
            name, sentences = texts.findings[finding][0]
            self.sets[finding] = AnchorSetRef(
                f"{finding}@{name}", f"{finding}:{name}", tuple(sentences), variants[0].embeddings
            )
        self.broad = bank.broad

    def anchor_set(self, finding, key):
        return self.sets[finding]

    def broad_prior(self):
        return "broad", self.broad


class Temperature:
    """Stands in for the encoder: queries are archived cases, only inv_t is read."""

    def __init__(self, inv_temperature: float):
        self.inv_temperature = inv_temperature


def archive_gallery(archive, embeddings: np.ndarray, encoder_id: str) -> Gallery:
    n = len(archive)
    ids = np.arange(1, n + 1, dtype=np.int64)
    meta = pd.DataFrame(
        {
            "study_uid": [str(i) for i in archive.image_ids],  # one image per phantom study
            "view_position": archive.labels["AP/PA"].astype(str).to_numpy(),
            "patient_sex": archive.labels["Sex"].astype(str).to_numpy(),
            "patient_age_years": archive.labels["Age"].astype(float).to_numpy(),
            "study_date": None,
            "split": np.asarray(archive.splits).astype(str),
        },
        index=ids,
    )
    labels = archive.labels[list(FINDINGS)].set_axis(ids)
    return Gallery(encoder_id, ids, np.asarray(embeddings, dtype=np.float32), meta, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0, help="phantom world seed")
    parser.add_argument("--geometries", nargs="+", default=list(GEOMETRY_CHOICES))
    parser.add_argument("--max-queries", type=int, default=0, help="per finding; 0 = all")
    args = parser.parse_args()
    print("load average at start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    texts = load_anchor_texts()
    archive, views = phantom_source(
        PhantomSourceConfig(n_images=args.images, seed=args.seed), texts, show_progress=False
    )
    view = views[0]
    gallery = archive_gallery(archive, view.embeddings, view.encoder_id)
    anchors = BankAnchors(texts, view.anchors)
    encoder = Temperature(view.inv_temperature)
    size = f"{len(gallery)} images x {gallery.dim}"
    print(f"{view.encoder_id}: {size}, inv_t {view.inv_temperature:.1f}")
    tasks = {}
    for finding in FINDINGS:
        task = finding_task(archive, finding, ProtocolConfig())
        if task.n_queries and task.key_class.any() and finding in anchors.sets:
            queries = task.query_index
            tasks[finding] = (task, queries[: args.max_queries] if args.max_queries else queries)
    print(f"{len(tasks)} findings, {sum(len(q) for _, q in tasks.values())} queries")
    header = f"{'geometry':<28} {'top-10 overlap':>14} {'min':>5} {'AP f32':>7} {'AP f16':>7}"
    print(header + f" {'mean dAP':>9} {'mean |dAP|':>10} {'max |dAP|':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        services = {
            dtype: SearchService(
                lambda: gallery,
                anchors,
                encoder,
                SearchConfig(feature_cache_dir=Path(tmp) / dtype, storage_dtype=dtype),
            )
            for dtype in ("float32", "float16")
        }
        for geometry in args.geometries:
            overlaps, per_finding, changes = [], {d: [] for d in services}, []
            for finding, (task, queries) in tasks.items():
                aps = {d: [] for d in services}
                for row in queries:
                    case = int(gallery.image_ids[row])
                    request = SearchRequest(finding=finding, geometry=geometry, case_id=case)
                    tops = {}
                    for dtype, service in services.items():
                        tops[dtype] = {h.image_id for h in service.search(request).hits}
                        scores, _ = service.gallery_scores(request)
                        relevant = task.key_class == 1
                        aps[dtype].append(
                            average_precision_rows(scores[task.key_index], relevant)[0]
                        )
                    overlaps.append(len(tops["float32"] & tops["float16"]) / len(tops["float32"]))
                for dtype in services:
                    per_finding[dtype].append(np.mean(aps[dtype]))
                changes += list(np.subtract(aps["float16"], aps["float32"]))
            ap32, ap16 = np.mean(per_finding["float32"]), np.mean(per_finding["float16"])
            changes = np.asarray(changes)
            print(
                f"{geometry:<28} {np.mean(overlaps):>14.4f} {np.min(overlaps):>5.1f} "
                f"{ap32:>7.4f} {ap16:>7.4f} {np.mean(changes):>+9.5f} "
                f"{np.mean(np.abs(changes)):>10.5f} {np.max(np.abs(changes)):>9.5f}",
                flush=True,
            )
    print("load average at end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
