"""Experiment (d), paper Table 4: retrieval time vs number of anchors for Q queries x G gallery.

One timed run = fit the geometry to N anchors + features of the gallery and the queries + scores of
every query against the gallery + the top-k neighbours of each query. Embeddings and anchors are
random unit vectors (time does not depend on their values). Scoring runs in query batches on the CPU
(numpy), or - with ``device="cuda"`` and a CUDA torch - as torch matmul + topk on the GPU from the
geometry's query vectors and key vectors (score = query_vectors @ keys.T + query_offsets).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from chexretrieve.evaluation.config import RuntimeConfig
from chexretrieve.evaluation.geometries import Fitter, fit_spec, parse_geometry
from chexretrieve.evaluation.progress import progress_bar

#: score elements per CPU block (bounds memory at ~ 32 MB of float32 scores)
_BLOCK = 8_000_000


def random_unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'; 'cuda' without one is an error."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"runtime device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return "cpu"
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a dependency
        available = False
    if device == "cuda" and not available:
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA GPU; use cpu or auto")
    return "cuda" if available else "cpu"


def _top_k_cpu(geom, fq: np.ndarray, fk: np.ndarray, k: int) -> np.ndarray:
    batch = max(1, _BLOCK // max(len(fk), 1))
    out = np.empty((len(fq), min(k, len(fk))), dtype=np.int64)
    for start in range(0, len(fq), batch):
        scores = geom.score(fq[start : start + batch], fk)
        top = np.argpartition(-scores, out.shape[1] - 1, axis=1)[:, : out.shape[1]]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        out[start : start + batch] = np.take_along_axis(top, order, axis=1)
    return out


def _top_k_cuda(geom, fq: np.ndarray, fk: np.ndarray, k: int) -> np.ndarray:
    import torch

    keys = torch.from_numpy(np.ascontiguousarray(geom.key_vectors(fk))).cuda()
    queries = torch.from_numpy(np.ascontiguousarray(geom.query_vectors(fq))).cuda()
    offsets = torch.from_numpy(np.ascontiguousarray(geom.query_offsets(fq))).cuda()
    batch = max(1, 200_000_000 // max(len(fk), 1))
    parts = []
    for start in range(0, len(fq), batch):
        scores = queries[start : start + batch] @ keys.T + offsets[start : start + batch, None]
        parts.append(torch.topk(scores, min(k, len(fk)), dim=1).indices)
    result = torch.cat(parts).cpu().numpy()
    torch.cuda.synchronize()
    return result


def time_retrieval(
    config: RuntimeConfig,
    *,
    fitter: Fitter | None = None,
    show_progress: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> pd.DataFrame:
    """Seconds per (geometry, N): mean, min and max over ``repeats`` runs after ``warmup`` runs."""
    device = resolve_device(config.device)
    rng = np.random.default_rng(config.seed)
    queries = random_unit(rng, config.n_queries, config.dim)
    gallery = random_unit(rng, config.n_gallery, config.dim)
    specs = [parse_geometry(g) for g in config.geometries]
    top_k = _top_k_cuda if device == "cuda" else _top_k_cpu
    rows = []
    runs = config.warmup + config.repeats
    with progress_bar(show_progress) as progress:
        bar = progress.add_task(
            f"runtime {config.n_queries}x{config.n_gallery} on {device}",
            total=len(specs) * len(config.anchor_counts) * runs,
        )
        for n in config.anchor_counts:
            anchors = random_unit(np.random.default_rng([config.seed, n]), n, config.dim)
            for spec in specs:
                times = []
                for run in range(runs):
                    start = clock()
                    geom = fit_spec(spec, anchors, 100.0, fitter=fitter)
                    fk = geom.features(gallery)
                    fq = geom.features(queries)
                    top_k(geom, fq, fk, config.top_k)
                    if run >= config.warmup:
                        times.append(clock() - start)
                    progress.advance(bar)
                rows.append(
                    {
                        "geometry": spec.name,
                        "n_anchors": n,
                        "mean_s": float(np.mean(times)),
                        "min_s": float(np.min(times)),
                        "max_s": float(np.max(times)),
                        "n_queries": config.n_queries,
                        "n_gallery": config.n_gallery,
                        "dim": config.dim,
                        "device": device,
                    }
                )
    return pd.DataFrame(rows)


def runtime_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 4 layout: rows = N anchors, columns = geometries, seconds."""
    table = frame.pivot(index="n_anchors", columns="geometry", values="mean_s")
    return table.reindex(columns=list(dict.fromkeys(frame["geometry"])))
