"""The natural-image protocol (the paper's ImageNet-R object-style setting) on a labelled folder.

Every image has a class (object) and a style label: ``root/<style>/<class>/<image>`` or a CSV with
columns ``path,class,style``. Retrieval is leave-one-out: every image queries all the others; for
the class coordinate a key is relevant when it shows the same class, for the style coordinate the
same style. Class anchors are ``template.format(class)``, style anchors ``template.format(style)``.

Outputs: AUPRC per coordinate and geometry (class anchors scored on the class coordinate, style
anchors on the style coordinate, cosine on both), and the mixing curve (softmax over the union of
class anchors at weight p and style anchors at 1 - p; AUPRC of both coordinates vs p; paper Fig. 3).
Intervals bootstrap over checkpoints (cells) and queries.

The encoder interface takes greyscale images: colour images are converted to luma grey unless the
encoder offers ``embed_rgb_images`` (then they go in as RGB), and the report says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from chexretrieve.evaluation.config import IntervalConfig, NaturalImageConfig
from chexretrieve.evaluation.experiments import mix_anchors
from chexretrieve.evaluation.geometries import Fitter, fit_spec, parse_geometry
from chexretrieve.evaluation.intervals import bootstrap_mean
from chexretrieve.evaluation.progress import progress_bar
from chexretrieve.evaluation.protocol import LabelledArchive, category_task
from chexretrieve.evaluation.scoring import task_average_precision

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def read_labelled_folder(
    root: str | Path, labels_csv: str | Path | None = None
) -> tuple[LabelledArchive, list[Path]]:
    """(archive with 'class' and 'style' columns, image paths) from a folder layout or a CSV."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"image folder {root} does not exist")
    if labels_csv is not None:
        table = pd.read_csv(labels_csv)
        missing = {"path", "class", "style"} - set(table.columns)
        if missing:
            raise ValueError(
                f"{labels_csv} lacks the columns {sorted(missing)} (need path,class,style)"
            )
        paths = [root / str(p) for p in table["path"]]
        absent = [p for p in paths if not p.is_file()]
        if absent:
            raise ValueError(
                f"{len(absent)} images in {labels_csv} are missing (first: {absent[0]})"
            )
        rows = table[["path", "class", "style"]].astype(str)
    else:
        paths = sorted(
            p for p in root.glob("*/*/*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
        )
        if not paths:
            raise ValueError(
                f"no images found as {root}/<style>/<class>/<image>; use that layout or "
                f"--labels-csv"
            )
        rows = pd.DataFrame(
            {
                "path": [p.relative_to(root).as_posix() for p in paths],
                "class": [p.parent.name for p in paths],
                "style": [p.parent.parent.name for p in paths],
            }
        )
    for column in ("class", "style"):
        if rows[column].nunique() < 2:
            raise ValueError(
                f"the folder has fewer than 2 distinct {column} labels; nothing to rank"
            )
    labels = rows[["class", "style"]].reset_index(drop=True)
    archive = LabelledArchive(rows["path"].to_numpy(), np.full(len(rows), "", dtype=object), labels)
    return archive, paths


def read_natural_image(path: Path, rgb: bool) -> np.ndarray:
    """float32 in [0, 1]: (h, w, 3) when ``rgb`` else luma grey (h, w)."""
    from PIL import Image

    with Image.open(path) as image:
        converted = image.convert("RGB" if rgb else "L")
        return np.asarray(converted, dtype=np.float32) / 255.0


def embed_natural_images(
    encoder, paths: Sequence[Path], batch_size: int, show_progress: bool
) -> tuple[np.ndarray, bool]:
    """(embeddings, whether colour was kept)."""
    rgb = hasattr(encoder, "embed_rgb_images")
    embed = encoder.embed_rgb_images if rgb else encoder.embed_images
    parts = []
    with progress_bar(show_progress) as progress:
        bar = progress.add_task(f"embedding images ({encoder.encoder_id})", total=len(paths))
        for start in range(0, len(paths), batch_size):
            chunk = paths[start : start + batch_size]
            parts.append(np.asarray(embed([read_natural_image(p, rgb) for p in chunk]), np.float32))
            progress.advance(bar, len(chunk))
    return np.concatenate(parts), rgb


def natural_anchor_texts(archive: LabelledArchive, config: NaturalImageConfig):
    from chexretrieve.anchors import natural_image_anchors

    classes = sorted(archive.labels["class"].astype(str).unique())
    styles = sorted(archive.labels["style"].astype(str).unique())
    class_texts = [t for tpl in config.class_templates for t in natural_image_anchors(classes, tpl)]
    style_texts = [t for tpl in config.style_templates for t in natural_image_anchors(styles, tpl)]
    return class_texts, style_texts


def evaluate_natural(
    archive: LabelledArchive,
    views: Sequence[tuple[str, float, np.ndarray, np.ndarray, np.ndarray]],
    config: NaturalImageConfig,
    intervals: IntervalConfig,
    *,
    fitter: Fitter | None = None,
    show_progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(AUPRC table, mixing frame). ``views``: (encoder id, inv_t, images, class anchors, style
    anchors) per checkpoint, image rows in archive order."""
    tasks = {
        "class": category_task(archive, "class", leave_one_out=True),
        "style": category_task(archive, "style", leave_one_out=True),
    }
    specs = [parse_geometry(g) for g in dict.fromkeys(("cosine", *config.geometries))]
    table_cells: dict[tuple[str, str], list[np.ndarray]] = {}
    mix_cells: dict[tuple[float, str], list[np.ndarray]] = {}
    units = len(views) * (len(specs) * 2 + len(config.weights))
    with progress_bar(show_progress) as progress:
        bar = progress.add_task("natural-image protocol", total=units)
        for _, inv_t, images, class_anchors, style_anchors in views:
            anchor_sets = {"class": class_anchors, "style": style_anchors}
            for spec in specs:
                for coordinate, task in tasks.items():
                    geom = fit_spec(spec, anchor_sets[coordinate], inv_t, fitter=fitter)
                    (ap,) = task_average_precision(geom, images, [task])
                    table_cells.setdefault((coordinate, spec.name), []).append(ap)
                    progress.advance(bar)
            softmax = parse_geometry("softmax")
            for p in config.weights:
                anchors, weights = mix_anchors(class_anchors, style_anchors, float(p))
                geom = fit_spec(softmax, anchors, inv_t, fitter=fitter, weights=weights)
                ap_class, ap_style = task_average_precision(
                    geom, images, [tasks["class"], tasks["style"]]
                )
                mix_cells.setdefault((float(p), "class"), []).append(ap_class)
                mix_cells.setdefault((float(p), "style"), []).append(ap_style)
                progress.advance(bar)
    rows = []
    for i, ((coordinate, geometry), aps) in enumerate(table_cells.items()):
        iv = bootstrap_mean(np.vstack(aps), intervals, seed_offset=i)
        rows.append(
            {
                "coordinate": coordinate,
                "geometry": geometry,
                "mean": iv.mean,
                "low": iv.low,
                "high": iv.high,
                "n_queries": tasks[coordinate].n_queries,
                "prevalence": tasks[coordinate].prevalence(),
            }
        )
    mix_rows = []
    for i, ((p, coordinate), aps) in enumerate(mix_cells.items()):
        iv = bootstrap_mean(np.vstack(aps), intervals, seed_offset=500 + i)
        mix_rows.append(
            {
                "finding": "class vs style anchors",
                "p": p,
                "coordinate": coordinate,
                "mean": iv.mean,
                "low": iv.low,
                "high": iv.high,
            }
        )
    return pd.DataFrame(rows), pd.DataFrame(mix_rows)


def natural_table_wide(table: pd.DataFrame) -> pd.DataFrame:
    """Rows = coordinate (with n queries, prevalence), columns = geometries, 'mean [low, high]'."""
    cells = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in table[["mean", "low", "high"]].values]
    wide = table.assign(cell=cells).pivot(index="coordinate", columns="geometry", values="cell")
    wide = wide.reindex(columns=list(dict.fromkeys(table["geometry"])))
    counts = table.groupby("coordinate")[["n_queries", "prevalence"]].first()
    wide["n queries"] = counts["n_queries"].astype(int).astype(str)
    wide["prevalence"] = counts["prevalence"].map(lambda v: f"{v:.3f}")
    wide.index.name = "coordinate"
    return wide
