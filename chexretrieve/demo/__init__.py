"""`make demo`: a phantom archive, ingested with the phantom encoder, searched in the UI.

A first run generates the archive and ingests it in parts and opens the page (printing its
address) after the first part; the rest of the archive arrives while the page is up, then the
anchor sets the page uses are embedded into the store and the archive index (features,
calibrations, density) is brought up to the complete archive. Every step reuses what an earlier
run left: the archive is generated once, ingest skips files whose stamp (path, size, mtime) is
unchanged, the anchor embeddings are kept in the store and the index appends only new rows, so a
second run opens the page in seconds.
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


def archive_is_complete(config: DemoConfig) -> bool:
    """Whether a complete phantom archive with the demo's settings is on disk (its manifest is
    written last)."""
    from chexretrieve.phantom.archive import MANIFEST

    manifest = config.archive_dir / MANIFEST
    if not manifest.exists():
        return False
    info = json.loads(manifest.read_text(encoding="utf-8"))
    return info.get("n_images") == config.n_images and info.get("seed") == config.seed


def grow_phantom_archive(config: DemoConfig, store, encoder, on_first_page) -> float:
    """Generate the phantom archive and ingest it part by part meanwhile
    (chexretrieve.demo.growing); ``on_first_page(stored)`` once the first part is in. Seconds."""
    from chexretrieve.demo.growing import GrowingArchive
    from chexretrieve.phantom.archive import write_archive
    from chexretrieve.phantom.config import ArchiveConfig, PhantomConfig

    out = config.archive_dir
    console.print(
        f"phantom archive: generating {config.n_images:,} images into {out}, ingesting them in "
        f"parts; the page opens once {config.first_page_images:,} are stored"
    )
    started = time.perf_counter()
    growing = GrowingArchive(config, store, encoder, on_first_page, say=console.print)
    archive = ArchiveConfig(n=config.n_images, seed=config.seed, force=out.exists())
    write_archive(out, archive, PhantomConfig(), on_case=growing.case_written)
    growing.flush()
    return time.perf_counter() - started


def ingest_demo_archive(config: DemoConfig, store, encoder) -> None:
    """Ingest the complete phantom archive (with labels): files stored before are skipped by
    their stamp, so a later run takes seconds."""
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths
    from chexretrieve.ingest.report import render_summary

    console.print(f"phantom archive: reusing {config.archive_dir} ({config.n_images:,} images)")
    labels = read_label_csv(config.archive_dir / "labels.csv")
    with _progress() as bar:
        task = bar.add_task("ingesting", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = ingest_paths(
            [config.archive_dir], store, encoder, IngestConfig(), labels=labels, progress=progress
        )
    render_summary(report, console)


def ingest_real_radiograph(store, encoder) -> None:
    """RG1 from pydicom-data, a real PA chest radiograph (MONOCHROME1), shown unlabelled."""
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.pipeline import ingest_paths

    real = real_radiograph()
    if real is not None:
        report = ingest_paths([real], store, encoder, IngestConfig(workers=0))
        if report.problems:
            console.print(f"[yellow]RG1 was not ingested:[/yellow] {report.outcomes[0].detail}")


def embed_demo_anchors(store, encoder) -> None:
    """The anchor sets the page searches with (each finding's latest set and the broad prior of
    the posterior geometries) embedded and kept in the store, as `chexretrieve anchors embed`
    does; the page's searches have stored some of them by now."""
    from chexretrieve.anchors import latest_anchor_set
    from chexretrieve.anchors.broad_prior import broad_prior_sets
    from chexretrieve.anchors.curation import embed_anchor_set
    from chexretrieve.findings import FINDINGS

    started = time.perf_counter()
    sets = [latest_anchor_set(f) for f in FINDINGS] + list(broad_prior_sets(None))
    rows = [embed_anchor_set(s, encoder, store, False) for s in sets]
    stored = sum(1 for r in rows if not r.cached)
    console.print(
        f"anchors: the {len(rows)} anchor sets the page uses are stored for "
        f"{encoder.encoder_id} ({stored} embedded now, {len(rows) - stored} already stored) in "
        f"{time.perf_counter() - started:.1f} s"
    )


def real_radiograph() -> Path | None:
    """RG1 from pydicom-data: a real PA chest radiograph (MONOCHROME1), shown unlabelled."""
    from chexretrieve.dicom import pydicom_test_file

    try:
        return Path(pydicom_test_file("RG1_UNCI.dcm"))
    except ValueError as exc:
        console.print(f"[yellow]skipping the real radiograph RG1:[/yellow] {exc}")
        return None


def run_demo(config: DemoConfig | None = None) -> None:
    """Generate (or reuse) the phantom archive, ingest it, open the page and print its address,
    then make sure every anchor set the page uses is stored and bring the archive index up to the
    archive; on a
    first run the page opens after the first part of the archive and the rest arrives while it
    is up."""
    from chexretrieve.encoders import load_encoder
    from chexretrieve.store import open_store

    config = config or DemoConfig()
    if config.serve:  # a busy port is said in one line before minutes of work, not after
        from chexretrieve.app import ensure_port_free

        ensure_port_free(config.host, config.port)
    started = time.perf_counter()
    console.print(SIMULATION_NOTICE)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(config.db_url)
    encoder = load_encoder(config.encoder)
    page = DemoPage(config, store, encoder, started)
    if archive_is_complete(config):
        ingest_demo_archive(config, store, encoder)
        ingest_real_radiograph(store, encoder)
        page.open(None)
    else:
        took = grow_phantom_archive(config, store, encoder, page.open)
        ingest_real_radiograph(store, encoder)
        console.print(
            f"phantom archive complete: {config.n_images:,} images generated and ingested in "
            f"{took:.1f} s, and RG1"
        )
    embed_demo_anchors(store, encoder)
    from chexretrieve.app.index_commands import update_after_ingest

    # the archive index of the complete archive: features, calibrations and density
    update_after_ingest(store, encoder, console)
    console.print(f"ready in {time.perf_counter() - started:.1f} s; database {config.db_url}")
    if config.serve:
        page.wait()
    else:
        example_search(config, store)


class DemoPage:
    """The case-lookup page of the demo, served from this process over the demo's own store (a
    first search embeds its anchor set and keeps it there; `serve` opens its store read-only)."""

    def __init__(self, config: DemoConfig, store, encoder, started: float):
        self.config, self.store, self.encoder, self.started = config, store, encoder, started
        self.app = None

    @property
    def address(self) -> str:
        return f"http://{self.config.host}:{self.config.port}/"

    def open(self, stored: int | None) -> None:
        """Serve the page (not blocking) and print its address; ``stored``: images so far of an
        archive still growing (None: complete)."""
        if not self.config.serve:
            return
        from chexretrieve.ui.app import build_app, launch_app, open_case_lookup
        from chexretrieve.ui.config import UIConfig

        ui = UIConfig(
            db_url=self.config.db_url, encoder=self.config.encoder, host=self.config.host,
            port=self.config.port, feature_cache_dir=self.config.feature_cache_dir,
        )  # fmt: skip
        lookup, curation = open_case_lookup(ui, self.store, self.encoder)
        self.app = build_app(lookup, curation, ui)
        launch_app(self.app, ui, block=False)
        growing = (
            ""
            if stored is None
            else f" ({stored:,} of {self.config.n_images:,} phantoms so far: the rest arrive "
            "while it is open, and each search sees them)"
        )
        console.print(
            f"[bold green]page:[/bold green] {self.address} after "
            f"{time.perf_counter() - self.started:.1f} s{growing}",
            soft_wrap=True,
        )

    def wait(self) -> None:
        """Until Ctrl+C; the address once more as the last line."""
        console.print(f"case lookup on {self.address} (Ctrl+C stops it)", soft_wrap=True)
        try:
            self.app.block_thread()
        except KeyboardInterrupt:
            pass
        finally:
            self.app.close()


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
