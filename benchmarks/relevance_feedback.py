"""Effect of one round of relevance feedback on retrieval (residual-collection AP).

For each finding, each validation image positive for it queries the training images whose label for
it is known (1 or 0). The user's feedback is simulated from the labels: among the first 10 results,
positives are marked relevant and negatives not relevant. AP is then measured on the keys the user
did NOT see (the residual collection), before and after re-ranking, so marked items cannot
inflate it.

    .venv/bin/python benchmarks/relevance_feedback.py --db sqlite:///data/demo/chexretrieve.sqlite
"""

from __future__ import annotations

import argparse

import numpy as np

from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.findings import FINDINGS
from chexretrieve.metrics import average_precision_rows
from chexretrieve.search.service import SearchRequest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--encoder", default="phantom")
    parser.add_argument("--geometries", nargs="+", default=["cosine", "softmax", "gaussian"])
    parser.add_argument("--queries", type=int, default=25, help="queries per finding (at most)")
    parser.add_argument("--seen", type=int, default=10, help="results the user marks")
    args = parser.parse_args()
    service = open_search_app(AppConfig(args.db, args.encoder)).service
    gallery = service.gallery
    split = gallery.metadata["split"].to_numpy()
    print(f"{'finding':<28} {'geometry':<10} {'n':>3} {'AP before':>9} {'AP after':>9} {'gain':>7}")
    summary: dict[str, list[float]] = {g: [] for g in args.geometries}
    for finding in FINDINGS:
        labels = gallery.labels[finding].to_numpy()
        keys = (split == "train") & np.isin(labels, (0.0, 1.0))
        queries = np.flatnonzero((split == "valid") & (labels == 1.0))[: args.queries]
        if len(queries) == 0 or not (labels[keys] == 1.0).any():
            continue
        for geometry in args.geometries:
            before, after = [], []
            for row in queries:
                case = int(gallery.image_ids[row])
                request = SearchRequest(finding=finding, geometry=geometry, case_id=case)
                scores, eligible = service.gallery_scores(request)
                pool = np.flatnonzero(keys & eligible)
                order = pool[np.argsort(-scores[pool], kind="stable")]
                seen = order[: args.seen]
                relevant = tuple(int(i) for i in gallery.image_ids[seen[labels[seen] == 1.0]])
                not_relevant = tuple(int(i) for i in gallery.image_ids[seen[labels[seen] == 0.0]])
                rest = np.setdiff1d(pool, seen)
                if not (labels[rest] == 1.0).any():
                    continue
                moved, _ = service.gallery_scores(
                    SearchRequest(
                        finding=finding,
                        geometry=geometry,
                        case_id=case,
                        relevant=relevant,
                        not_relevant=not_relevant,
                    )
                )
                truth = labels[rest] == 1.0
                before.append(average_precision_rows(scores[rest], truth)[0])
                after.append(average_precision_rows(moved[rest], truth)[0])
            if before:
                b, a = float(np.mean(before)), float(np.mean(after))
                summary[geometry].append(a - b)
                n = len(before)
                print(f"{finding:<28} {geometry:<10} {n:>3} {b:>9.3f} {a:>9.3f} {a - b:>+7.3f}")
    for geometry, gains in summary.items():
        if gains:
            print(f"mean gain over findings, {geometry}: {np.mean(gains):+.3f}")


if __name__ == "__main__":
    main()
