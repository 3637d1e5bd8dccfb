"""What the hardening of issue 23 costs: keyed, fsync'ed audit records, verifying a trail, and
reading the archive revision before every search.

    .venv/bin/python benchmarks/audit_integrity.py                  # 2,000 records, 60-image store
    .venv/bin/python benchmarks/audit_integrity.py --records 500 --searches 100

Printed: the load average; audit records per second with fsync on (the default) and off, and
their ratio, and with the trail anchored in a SQLite store (issue 36), and its ratio; seconds to
verify the trail (HMAC, chain, head); the median search latency with and without the revision
check (one SELECT of one row; measured interleaved), their ratio, and the query alone; the search
latency right after an ingest (gallery reloaded, features extended). Figures depend on the disk
(fsync) and the machine; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ingest"))


def _append_rate(folder: Path, n: int, fsync: bool, store_url: str | None = None) -> float:
    """Records per second; with ``store_url`` the trail is anchored in that store (issue 36: a
    background thread writes the anchor; the time includes waiting for its last write)."""
    from chexretrieve.audit import AuditLog

    witness = None
    if store_url is not None:
        from chexretrieve.audit.anchor import StoreWitness
        from chexretrieve.store.audit_anchor import AuditAnchorTable

        witness = StoreWitness(AuditAnchorTable(store_url))
    name = f"trail-{fsync}{'-anchored' if witness else ''}.jsonl"
    audit = AuditLog(folder / name, fsync=fsync, key_path=folder / "k.key", anchor=witness)
    start = time.perf_counter()
    for i in range(n):
        audit.view("dr.bench", i, f"1.2.840.{i}", what="details")
    if witness is not None:
        assert witness.flush(120) and not witness.error, witness.error
    return n / (time.perf_counter() - start)


def _search_latencies(folder: Path, searches: int) -> tuple[float, float, float]:
    """Median seconds of (a search with the revision check, one without, the revision query
    alone), measured interleaved so that a busy machine slows all three alike."""
    from ingest_fixtures import write_archive

    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.audit import AuditConfig
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig, ingest_paths
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.service import SearchRequest
    from chexretrieve.store import open_store

    store = open_store(f"sqlite:///{folder / 'store.sqlite'}")
    write_archive(folder / "archive", 60, size=32)
    ingest_paths([folder / "archive"], store, StandInEncoder(dim=32), IngestConfig(workers=0))
    config = AppConfig(
        store.config.url,
        search=SearchConfig(feature_cache_dir=folder / "features"),
        audit=AuditConfig(enabled=False),
    )
    service = open_search_app(config, store=store, encoder=StandInEncoder(dim=32)).service
    check = service._revision
    request = SearchRequest(finding="Edema", case_id=int(service.gallery.image_ids[0]), top_k=10)
    service.search(request)  # warm: features computed
    on, off, query = [], [], []
    for _ in range(searches):
        for revision, times in ((check, on), (None, off)):
            service._revision = revision
            start = time.perf_counter()
            service.search(request)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.archive_revision()
        query.append(time.perf_counter() - start)
    store.close()
    return statistics.median(on), statistics.median(off), statistics.median(query)


def _after_ingest(folder: Path, gallery: int = 600, batches: int = 5) -> tuple[float, float, float]:
    """Median seconds of a search in a steady archive, and median / max of the first search of
    each of 9 (finding, geometry) pairs after an ingest of 8 images (the gallery reloaded and its
    features extended), over a ``gallery``-image archive with 512-dimensional embeddings."""
    from ingest_fixtures import write_archive

    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.audit import AuditConfig
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.ingest import IngestConfig, ingest_paths
    from chexretrieve.search.config import SearchConfig
    from chexretrieve.search.service import SearchRequest
    from chexretrieve.store import open_store

    encoder = StandInEncoder(dim=512)
    store = open_store(f"sqlite:///{folder / 'grow.sqlite'}")
    write_archive(folder / "grow", gallery, size=32)
    ingest_paths([folder / "grow"], store, encoder, IngestConfig(workers=0))
    config = AppConfig(
        store.config.url,
        search=SearchConfig(feature_cache_dir=folder / "grow-features"),
        audit=AuditConfig(enabled=False),
    )
    service = open_search_app(config, store=store, encoder=encoder).service
    case = int(service.gallery.image_ids[0])
    requests = [
        SearchRequest(finding=f, geometry=g, case_id=case, top_k=10)
        for f in ("Edema", "Pneumothorax", "Cardiomegaly")
        for g in ("softmax", "cosine", "gaussian")
    ]
    for request in requests:
        service.search(request)

    def timed(request) -> float:  # noqa: ANN001
        start = time.perf_counter()
        service.search(request)
        return time.perf_counter() - start

    steady = [timed(r) for _ in range(3) for r in requests]
    after = []
    for k in range(batches):
        batch = folder / f"batch{k}"
        write_archive(batch, 8, size=32, start=10_000 + 8 * k)
        ingest_paths([batch], store, encoder, IngestConfig(workers=0))
        after += [timed(r) for r in requests]
    store.close()
    return statistics.median(steady), statistics.median(after), max(after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--folder", type=Path, default=None, help="Where to write (default: tmp)")
    args = parser.parse_args()
    os.environ.setdefault("CHEXRETRIEVE_TEST_ENCODERS", "1")
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        folder = Path(tmp)
        load_before = os.getloadavg()[0]
        synced = _append_rate(folder, args.records, fsync=True)
        unsynced = _append_rate(folder, args.records, fsync=False)
        from chexretrieve.store import open_store

        anchor_url = f"sqlite:///{folder / 'anchor.sqlite'}"
        open_store(anchor_url).close()
        anchored = _append_rate(folder, args.records, fsync=True, store_url=anchor_url)
        from chexretrieve.audit import check_audit_file

        start = time.perf_counter()
        report = check_audit_file(folder / "trail-True.jsonl", folder / "k.key")
        verify_s = time.perf_counter() - start
        assert report.intact, report.problems
        checked, unchecked, query = _search_latencies(folder, args.searches)
        steady, after, worst = _after_ingest(folder)
    print(f"load average (1 min) before / after: {load_before:.1f} / {os.getloadavg()[0]:.1f}")
    print(f"audit records/s, fsync on:  {synced:,.0f}")
    print(f"audit records/s, fsync off: {unsynced:,.0f}  (fsync costs x{unsynced / synced:.2f})")
    print(
        f"audit records/s, fsync on, anchored in a SQLite store: {anchored:,.0f}  "
        f"(ratio to unanchored {anchored / synced:.2f})"
    )
    print(f"verify {args.records:,} records: {verify_s:.3f} s")
    print(f"median search, revision check on:  {checked * 1000:.2f} ms")
    ratio = checked / unchecked
    print(f"median search, revision check off: {unchecked * 1000:.2f} ms  (ratio {ratio:.3f})")
    print(f"median revision query alone:       {query * 1000:.3f} ms")
    print(
        f"600 images, 512-d: search {steady * 1000:.1f} ms steady; first after an 8-image "
        f"ingest {after * 1000:.1f} ms median, {worst * 1000:.1f} ms max (reload + extension)"
    )


if __name__ == "__main__":
    main()
