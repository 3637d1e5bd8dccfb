"""`make demo`: a phantom archive, ingested with the phantom encoder, searched in the UI.

Every step reuses what an earlier run left: the archive is generated once, ingest skips files whose
stamp (path, size, mtime) is unchanged, and gallery features persist in the data folder, so a second
run starts in seconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from chexretrieve.demo.config import DemoConfig

console = Console()

SIMULATION_NOTICE = (
    "[bold yellow]Phantom world:[/bold yellow] the images are procedurally generated phantoms and "
    "the model was trained on them. This is a simulation, not clinical data."
)


def _progress() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        "[progress.percentage]{task.percentage:>3.0f}%",
        TimeRemainingColumn(),
        console=console,
    )


def ensure_phantom_archive(config: DemoConfig) -> Path:
    """Generate the phantom archive unless a complete one with the same settings exists."""
    from chexretrieve.phantom.archive import MANIFEST, write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    out = config.archive_dir
    manifest = out / MANIFEST
    if manifest.exists():
        info = json.loads(manifest.read_text(encoding="utf-8"))
        if info.get("n_images") == config.n_images and info.get("seed") == config.seed:
            console.print(f"phantom archive: reusing {out} ({config.n_images} images)")
            return out
    console.print(f"phantom archive: generating {config.n_images} images into {out}")
    archive = ArchiveConfig(n=config.n_images, seed=config.seed, force=out.exists())
    with _progress() as bar:
        task = bar.add_task("generating phantoms", total=config.n_images)
        write_archive(out, archive, PhantomConfig(), progress=lambda k: bar.advance(task, k))
    return out


def ingest_demo_archive(config: DemoConfig, store, encoder) -> None:
    """Ingest the phantom archive (with labels) and RG1, a real radiograph from pydicom-data."""
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.ingest.report import render_summary

    labels = read_label_csv(config.archive_dir / "labels.csv")
    paths: list[Path] = [config.archive_dir]
    real = real_radiograph()
    if real is not None:
        paths.append(real)
    with _progress() as bar:
        task = bar.add_task("ingesting", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = ingest_paths(
            paths, store, encoder, IngestConfig(), labels=labels, progress=progress
        )
    render_summary(report, console)
    from chexretrieve.app.index_commands import update_after_ingest

    # the archive index: features, calibrations and density ready before the first search
    update_after_ingest(store, encoder, console)


def real_radiograph() -> Path | None:
    """RG1 from pydicom-data: a real PA chest radiograph (MONOCHROME1), shown unlabelled."""
    from chexretrieve.dicom import pydicom_test_file

    try:
        return Path(pydicom_test_file("RG1_UNCI.dcm"))
    except ValueError as exc:
        console.print(f"[yellow]skipping the real radiograph RG1:[/yellow] {exc}")
        return None


def run_demo(config: DemoConfig | None = None) -> None:
    from chexretrieve.encoders import load_encoder
    from chexretrieve.store import open_store

    config = config or DemoConfig()
    if config.serve:  # a busy port is said in one line before minutes of work, not after
        from chexretrieve.app import ensure_port_free

        ensure_port_free(config.host, config.port)
    started = time.perf_counter()
    console.print(SIMULATION_NOTICE)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    ensure_phantom_archive(config)
    store = open_store(config.db_url)
    encoder = load_encoder(config.encoder)
    ingest_demo_archive(config, store, encoder)
    console.print(f"ready in {time.perf_counter() - started:.1f} s; database {config.db_url}")
    if config.serve:
        from chexretrieve.ui import serve_app
        from chexretrieve.ui.config import UIConfig

        serve_app(
            UIConfig(
                db_url=config.db_url,
                encoder=config.encoder,
                host=config.host,
                port=config.port,
                feature_cache_dir=config.feature_cache_dir,
            )
        )
    else:
        example_search(config, store)


def example_search(config: DemoConfig, store) -> None:
    """Print one search (by the first validation case positive for pleural effusion)."""
    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.output import print_result
    from chexretrieve.search.service import SearchRequest

    search = SearchConfig(feature_cache_dir=config.feature_cache_dir)
    app_config = AppConfig(config.db_url, config.encoder, search=search)
    service = open_search_app(app_config, store=store).service
    gallery = service.gallery
    finding = "Pleural Effusion"
    positive = gallery.label_values(finding) == 1.0
    splits, names = gallery.columns.codes("split")
    valid = splits == (list(names).index("valid") if "valid" in list(names) else -2)
    rows = (positive & valid).nonzero()[0]
    case = int(gallery.image_ids[rows[0] if len(rows) else 0])
    for geometry in ("cosine", "softmax"):
        result = service.search(
            SearchRequest(finding=finding, geometry=geometry, case_id=case, top_k=10)
        )
        print_result(result, explain=False)
