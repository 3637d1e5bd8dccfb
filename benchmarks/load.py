"""Load: N concurrent users searching one SQLite archive while an ingest writes to it.

Each simulated user is a thread that loops until the time is up over the actions of the case
lookup: a search by an archived case (random finding and geometry), the UI handler's search (one
ranking with its percentiles and thumbnails), a search with explanations, a search after reloading
the gallery from the database (what a server does after an ingest), and direct metadata reads, with
a pause between actions (exponential, mean ``--think-s``; 0 makes every user hammer the server). One
search service is shared by all users, as in the UI server. Meanwhile ``chexretrieve ingest``
runs in separate processes over fresh folders of radiographs, one after another, writing batches
into the same database. Reported: requests, p50 / p95 / p99 / max latency, errors by kind (any
"database is locked" counted separately) and images written during the load.

    .venv/bin/python benchmarks/load.py                       # 20 users, 60 s, 600-image gallery
    .venv/bin/python benchmarks/load.py --users 5 --seconds 20 --gallery 200 --json load.json
    .venv/bin/python benchmarks/load.py --no-thumbnails       # results read from their files

Goals: 20 users, p95 <= 2 s, zero errors; the UI search (one ranking and 12 thumbnails) p95
<= 1 s. Ingest stores a thumbnail per image (``IngestConfig.thumbnail_px``) and the UI shows results
from those; ``--no-thumbnails`` ingests without them, so the UI reads each result's file (before).

The stand-in encoder (fixed-cost deterministic embeddings, 512 dimensions) stands for the model:
search cost depends on the gallery and the geometry, not on the encoder's weights. HTTP against
the Gradio app is not driven: its search events are private (not part of the app's API), so the
threads call the same handlers the app calls.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from chexretrieve.audit import AuditLog  # noqa: E402
from chexretrieve.findings import FINDINGS  # noqa: E402

GEOMETRIES = ("softmax", "cosine", "gaussian", "latent_gaussian")
#: what a simulated user does, with cumulative probabilities
ACTIONS = (
    ("search", 0.5),
    ("ui-search", 0.7),
    ("explain", 0.8),
    ("refresh+search", 0.9),
    ("metadata", 1.01),
)
ENCODER_SPEC = "stand-in:{ms}:512"
MIN_WRITTEN_GUARD_S = 300.0  # run_load(min_written=...): a hang guard, not a goal


@dataclass
class LoadReport:
    users: int
    seconds: float
    gallery: int
    think_s: float = 0.0
    requests: int = 0
    p50_s: float = 0.0
    p95_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0
    errors: int = 0
    locked_errors: int = 0
    error_kinds: dict = field(default_factory=dict)
    by_action: dict = field(default_factory=dict)
    ingest_runs: int = 0
    ingest_failures: int = 0
    images_written_during_load: int = 0
    thumbnails: bool = True
    ui_search_p95_s: float = 0.0
    load_average: tuple = ()  # 1-minute load average before and after the load


def write_radiographs(folder: Path, n: int, start: int, size: int = 64) -> list[Path]:
    """``n`` small seeded CR radiographs (the project's own DICOM writer)."""
    from chexretrieve.dicom.write import derive_uid, write_radiograph

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(start, start + n):
        rng = np.random.default_rng(index)
        pixels = rng.integers(0, 4096, size=(size, size), dtype=np.uint16)
        meta = {
            "PatientID": f"LOAD{index % 97:04d}",
            "StudyInstanceUID": derive_uid("load", index, "study"),
            "SeriesInstanceUID": derive_uid("load", index, "series"),
            "SOPInstanceUID": derive_uid("load", index, "image"),
            "Modality": "CR",
            "PatientSex": "MF"[index % 2],
            "PatientAge": f"{20 + index % 70:03d}Y",
            "StudyDate": f"20{10 + index % 15:02d}0{1 + index % 9}15",
            "ViewPosition": ("PA", "AP")[index % 2],
        }
        paths.append(write_radiograph(folder / f"img{index:06d}.dcm", pixels, meta))
    return paths


def seed_archive(db_url: str, folder: Path, n: int, thumbnail_px: int = 256) -> None:
    """Ingest ``n`` radiographs so the searches have a gallery (in-process, stand-in encoder)."""
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig, ingest_paths
    from chexretrieve.store import open_store

    write_radiographs(folder, n, start=0)
    with open_store(db_url) as store:
        ingest_paths(
            [folder],
            store,
            StandInEncoder(dim=512),
            IngestConfig(workers=1, batch_size=32, thumbnail_px=thumbnail_px),
        )


class IngestLoop(threading.Thread):
    """``chexretrieve ingest`` over a fresh folder of ``per_run`` images, again and again."""

    def __init__(
        self, db_url: str, folder: Path, per_run: int, encoder_ms: int, thumbnail_px: int = 256
    ) -> None:
        super().__init__(name="ingest-loop", daemon=True)
        self.db_url, self.folder, self.per_run = db_url, folder, per_run
        self.thumbnail_px = thumbnail_px
        self.encoder = ENCODER_SPEC.format(ms=encoder_ms)
        self.stop = threading.Event()
        self.runs = 0
        self.failures: list[str] = []
        self.process: subprocess.Popen | None = None

    def run(self) -> None:
        env = {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1"}
        start = 1_000_000
        while not self.stop.is_set():
            part = self.folder / f"part{self.runs:04d}"
            write_radiographs(part, self.per_run, start)
            start += self.per_run
            command = [
                sys.executable,
                "-m",
                "chexretrieve",
                "ingest",
                str(part),
                "--db",
                self.db_url,
                "--encoder",
                self.encoder,
                "--batch-size",
                "8",
                "--workers",
                "1",
                "--thumbnail-px",
                str(self.thumbnail_px),
                "--no-progress",
            ]
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            output, _ = self.process.communicate()
            if self.stop.is_set() and self.process.returncode != 0:
                break  # terminated at the end of the load
            self.runs += 1
            if self.process.returncode != 0:
                self.failures.append(output[-500:])

    def halt(self) -> None:
        self.stop.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
        self.join(timeout=60)


def _user(context: dict, stop: threading.Event, seed: int, out: list) -> None:
    """One simulated user: actions drawn at random until ``stop`` is set, each timed."""
    from chexretrieve.search.service import SearchRequest
    from chexretrieve.ui.handlers import SearchSettings

    service, store, lookup = context["service"], context["store"], context["lookup"]
    image_ids, findings, geometries = (
        context["image_ids"],
        context["findings"],
        context["geometries"],
    )
    user = f"load-user-{seed}" if context["audit"] else None
    rng = random.Random(seed)
    while not stop.is_set():
        draw = rng.random()
        action = next(name for name, upto in ACTIONS if draw < upto)
        finding, geometry = rng.choice(findings), rng.choice(geometries)
        case_id = int(rng.choice(image_ids))
        started = time.perf_counter()
        try:
            if action == "metadata":
                store.image_by_id(case_id)
                store.count_images()
            elif action == "ui-search":  # the UI's handler: the ranking, percentiles, thumbnails
                query = lookup.load_case(case_id)
                lookup.search(query, SearchSettings(finding=finding, geometry=geometry))
            else:
                if action == "refresh+search":
                    service.refresh()
                request = SearchRequest(
                    finding=finding,
                    geometry=geometry,
                    case_id=case_id,
                    top_k=12,
                    explain=action == "explain",
                )
                service.search(request, **({"user": user} if user else {}))
            error = None
        except Exception as exc:  # noqa: BLE001 - every failure a user would see is counted
            first = str(exc).splitlines()[0][:120] if str(exc) else ""
            error = f"{type(exc).__name__}: {first}"
            if os.environ.get("CHEXRETRIEVE_LOAD_TRACEBACKS"):  # debugging: where it failed
                import traceback

                traceback.print_exc()
        out.append((action, time.perf_counter() - started, error))
        if context["think_s"] > 0:  # a person looks at the results before the next action
            time.sleep(min(rng.expovariate(1.0 / context["think_s"]), 5 * context["think_s"]))


def run_load(
    db_url: str,
    work: Path,
    *,
    users: int = 20,
    seconds: float = 60.0,
    ingest_per_run: int = 200,
    encoder_ms: int = 10,
    findings: tuple[str, ...] = FINDINGS,
    geometries: tuple[str, ...] = GEOMETRIES,
    think_s: float = 1.0,
    audit=None,  # noqa: ANN001
    thumbnails: bool = True,
    min_written: int = 0,
) -> LoadReport:
    """Run the load against an already seeded archive; ``audit`` (an AuditLog) is optional.

    The users stop after ``seconds``, or later, once ingest has written ``min_written`` images
    during the load (so a test can require that it really wrote, on a machine of any speed; a
    hang guard of ``MIN_WRITTEN_GUARD_S`` seconds more ends it anyway)."""
    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.audit import AuditConfig
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.service import SearchRequest
    from chexretrieve.store import open_store
    from chexretrieve.ui.handlers import CaseLookup

    store = open_store(db_url)
    config = AppConfig(
        db_url,
        search=SearchConfig(feature_cache_dir=work / "features"),
        audit=AuditConfig(path=audit.path) if audit is not None else AuditConfig(enabled=False),
    )
    # the composition root, as the UI builds it; the stand-in (no sleep) as the searching encoder
    service = open_search_app(config, store=store, encoder=StandInEncoder(dim=512)).service
    image_ids = [int(i) for i in service.gallery.image_ids]
    for geometry in geometries:  # warm: fit geometries and features once, as a server does
        for finding in findings:
            service.search(SearchRequest(finding=finding, geometry=geometry, case_id=image_ids[0]))
    context = {
        "service": service,
        "store": store,
        "lookup": CaseLookup(service, store),  # the UI's default thumbnail size (256 px)
        "image_ids": image_ids,
        "findings": tuple(findings),
        "geometries": tuple(geometries),
        "audit": audit is not None,
        "think_s": think_s,
    }
    before = store.count_images()
    thumbnail_px = 256 if thumbnails else 0
    ingest = IngestLoop(db_url, work / "incoming", ingest_per_run, encoder_ms, thumbnail_px)
    load_before = os.getloadavg()[0]
    ingest.start()
    results: list[tuple[str, float, str | None]] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_user, args=(context, stop, seed, results)) for seed in range(users)
    ]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    guard = time.monotonic() + MIN_WRITTEN_GUARD_S
    while store.count_images() - before < min_written and time.monotonic() < guard:
        stop.wait(0.25)
    stop.set()
    for thread in threads:
        thread.join()
    written = store.count_images() - before
    ingest.halt()
    store.close()
    report = summarise(results, users, seconds, len(image_ids), ingest, written)
    report.think_s = think_s
    report.thumbnails = thumbnails
    report.ui_search_p95_s = report.by_action.get("ui-search", {}).get("p95_s", 0.0)
    report.load_average = (round(load_before, 2), round(os.getloadavg()[0], 2))
    return report


def summarise(results, users, seconds, gallery, ingest, written) -> LoadReport:  # noqa: ANN001
    latencies = np.array([r[1] for r in results]) if results else np.zeros(1)
    errors = collections.Counter(r[2] for r in results if r[2] is not None)
    by_action = {}
    for action in sorted({r[0] for r in results}):
        times = np.array([r[1] for r in results if r[0] == action])
        by_action[action] = {
            "requests": int(times.size),
            "p95_s": round(float(np.percentile(times, 95)), 4),
        }
    return LoadReport(
        users=users,
        seconds=seconds,
        gallery=gallery,
        requests=len(results),
        p50_s=round(float(np.percentile(latencies, 50)), 4),
        p95_s=round(float(np.percentile(latencies, 95)), 4),
        p99_s=round(float(np.percentile(latencies, 99)), 4),
        max_s=round(float(latencies.max()), 4),
        errors=sum(errors.values()),
        locked_errors=sum(n for kind, n in errors.items() if "locked" in kind.lower()),
        error_kinds=dict(errors.most_common(10)),
        by_action=by_action,
        ingest_runs=ingest.runs,
        ingest_failures=len(ingest.failures),
        images_written_during_load=int(written),
    )


def main(argv: list[str] | None = None) -> LoadReport:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--gallery", type=int, default=600, help="images ingested before the load")
    parser.add_argument("--ingest-per-run", type=int, default=200)
    parser.add_argument("--encoder-ms", type=int, default=10, help="stand-in cost per image")
    parser.add_argument("--findings", type=int, default=len(FINDINGS), help="first N findings")
    parser.add_argument(
        "--think-s",
        type=float,
        default=1.0,
        help="mean pause between a user's actions (exponential; 0 = none)",
    )
    parser.add_argument("--audit", action="store_true", help="record every search in an audit file")
    parser.add_argument(
        "--thumbnails",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ingest with thumbnails (the UI shows them) or without (the UI reads the files)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chexretrieve-load-") as tmp:
        work = Path(tmp)
        db_url = f"sqlite:///{work / 'load.sqlite'}"
        os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = "1"
        print(f"seeding a {args.gallery}-image archive ...", flush=True)
        seed_archive(db_url, work / "seed", args.gallery, 256 if args.thumbnails else 0)
        print(f"{args.users} users for {args.seconds:g} s while ingest writes ...", flush=True)
        report = run_load(
            db_url,
            work,
            users=args.users,
            seconds=args.seconds,
            ingest_per_run=args.ingest_per_run,
            encoder_ms=args.encoder_ms,
            findings=FINDINGS[: args.findings],
            think_s=args.think_s,
            audit=AuditLog(work / "audit.jsonl") if args.audit else None,
            thumbnails=args.thumbnails,
        )
    print(
        f"users {report.users} (think {report.think_s:g} s), {report.seconds:g} s, "
        f"gallery {report.gallery}: "
        f"{report.requests} requests, p50 {report.p50_s:.3f} s, p95 {report.p95_s:.3f} s, "
        f"p99 {report.p99_s:.3f} s, max {report.max_s:.3f} s"
    )
    print(
        f"errors {report.errors} (database is locked: {report.locked_errors}) "
        f"{report.error_kinds or ''}"
    )
    for action, row in report.by_action.items():
        print(f"  {action:15s} {row['requests']:6d} requests, p95 {row['p95_s']:.3f} s")
    print(
        f"ingest during the load: {report.ingest_runs} runs completed, "
        f"{report.ingest_failures} failed, {report.images_written_during_load} images written"
    )
    goal = report.p95_s <= 2.0 and report.errors == 0
    print(f"goal (p95 <= 2 s, zero errors): {'met' if goal else 'NOT met'}")
    ui_goal = 0 < report.ui_search_p95_s <= 1.0
    print(
        f"UI search p95 {report.ui_search_p95_s:.3f} s with "
        f"{'stored thumbnails' if report.thumbnails else 'thumbnails read from the files'} "
        f"(goal <= 1 s: {'met' if ui_goal else 'NOT met'}); load average "
        f"{report.load_average[0]:.2f} before, {report.load_average[1]:.2f} after"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    return report


if __name__ == "__main__":
    main()
