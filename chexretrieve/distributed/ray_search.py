"""Search on a Ray cluster: actors holding one shard of the archive index each.

The archive index (``chexretrieve.index``) keeps every per-row file as a plain ``.npy`` whose row
``i`` is the same image in every file, so shard ``k`` of ``K`` is rows ``[k n / K, (k + 1) n / K)``
of every file. Each :class:`ShardRanker` actor maps its row range of the gallery's columns and of
the searched (finding, anchor-set version, geometry) feature file from the index folder, which
every node reads at the same path (a shared mount); nothing is copied into the actor but the
derived filter columns of its rows.

A search is ranked as in one process (``SearchService._rank``), split:

* the driver (the ``serve`` / ``search`` process) fits the geometry, computes the query's vector
  and offset (every geometry scores a row ``vector · f_k + offset``) and what is excluded by id
  (the archived query's row and study, copies of an upload, ``exclude_ids``);
* every shard applies the filters and the exclusions to its rows (``eligible_mask``) and returns
  its exact top k, ties broken by image id (``rank_exactly``), or an HNSW / IVF index's top k
  over its rows when ``SearchConfig.index_kind`` asks for one and the shard holds at least
  ``SearchConfig.index_min_gallery`` rows (built by the actor in a background thread from its
  first search of the entry; until it is built, and if its build fails, the shard ranks exactly,
  so no search waits for a build);
* the driver keeps the best k of the union by (score descending, image id ascending): the best k
  of every shard's best k are the best k of all rows, so the exact ranking equals the
  single-process one, ids and order (``tests/scale/test_scale_ray_search.py``).

Relevance-feedback searches, galleries not read from an index, and feature entries the index does
not hold complete yet are ranked in the driver's process as before (the index builds them there).
The manifest and entry records (with the block hashes every read is checked against) travel to
the actors through Ray's object store once per generation; the actors never read the seal key.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.index.columns import label_floats
from chexretrieve.index.gallery import IndexColumns, IndexGallery
from chexretrieve.index.rowfile import HEADER_BYTES, MappedRows, RowFileRecord
from chexretrieve.search.config import SearchConfig, ShardedSearchConfig
from chexretrieve.search.gallery import Exclusions, SearchFilters, eligible_mask
from chexretrieve.search.scoring import KeyMatrix, rank_exactly

logger = logging.getLogger(__name__)

#: environment variables handed to the actors (cache root, configuration folder, threads)
FORWARDED_ENV = ("CHEXRETRIEVE_CACHE", "XDG_CONFIG_HOME", "OMP_NUM_THREADS")


def shard_bounds(rows: int, shards: int) -> list[tuple[int, int]]:
    """[start, stop) of each of ``shards`` contiguous near-equal row ranges (some may be empty)."""
    edges = [rows * k // shards for k in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


class _RowSlice:
    """Rows [start, stop) of one mapped row file; ``all()`` verifies their blocks first."""

    def __init__(self, mapped: MappedRows, start: int, stop: int):
        self.mapped, self.start, self.stop = mapped, start, stop

    def all(self) -> np.ndarray:
        self.mapped.verify(self.start, self.stop)
        return self.mapped.array[self.start : self.stop]


class ShardGallery:
    """Rows [start, stop) of an index generation: what ``eligible_mask`` reads of a gallery
    (the filter columns through ``IndexColumns``, study codes, labels), sliced, never whole."""

    def __init__(self, manifest, start: int, stop: int):
        self.manifest = manifest
        self.start, self.stop = int(start), int(stop)
        self._lock = threading.Lock()
        self._maps: dict[str, _RowSlice] = {}
        self._derived: dict[tuple, object] = {}
        self.columns = IndexColumns(self)  # type: ignore[arg-type]
        self.image_ids = np.asarray(self._map("image_ids").all())
        self.study_codes = np.asarray(self._map("study_ids").all())

    def __len__(self) -> int:
        return self.stop - self.start

    def _map(self, name: str) -> _RowSlice:
        found = self._maps.get(name)
        if found is None:
            mapped = MappedRows(self.manifest.folder, self.manifest.file(name))
            with self._lock:
                found = self._maps.setdefault(name, _RowSlice(mapped, self.start, self.stop))
        return found

    _derive = IndexGallery._derive  # values derived once from the rows (same attributes)

    def has_column(self, name: str) -> bool:
        return f"meta/{name}" in self.manifest.content["files"]

    def label_values(self, finding: str) -> np.ndarray:
        j = FINDINGS.index(canonical_finding(finding))
        return self._derive(("labels", j), lambda: label_floats(self._map("labels").all()[:, j]))


@dataclass(frozen=True)
class ShardQuery:
    """One search as every shard receives it (small: the records travel as object refs)."""

    # the generation and entry the query ranks, and refs to their records ([ref]: a ref inside
    # a list is not fetched by Ray before the call; an actor fetches it only when it lacks it)
    generation: int
    manifest_ref: list
    entry_name: str
    entry_ref: list
    # every row scores vector · f + offset
    vector: np.ndarray
    offset: float
    k: int
    filters: SearchFilters
    finding: str
    exclusions: Exclusions
    # "none" or an ANN kind, the shard size from which it is used, and the fitted geometry's ref
    index_kind: str = "none"
    index_min_rows: int = 0
    geometry_ref: list | None = None
    # how many ANN indexes a shard keeps (SearchConfig.index_cache_entries), the least recently
    # used going first
    index_entries: int = 4
    # threads one shard's exact scan uses
    threads: int = 1


class ShardRanker:
    """Shard ``shard`` of ``shards`` (a Ray actor; a plain object in tests of the logic)."""

    def __init__(self, shard: int, shards: int):
        self.shard, self.shards = int(shard), int(shards)
        self._generation: int | None = None
        self._gallery: ShardGallery | None = None
        self._keys: dict[tuple, KeyMatrix] = {}
        # (generation, entry, kind) -> the ANN index built (least recently used first), the
        # thread building it, why its build failed (not retried for that generation)
        self._indexes: OrderedDict[tuple, object] = OrderedDict()
        self._builds: dict[tuple, threading.Thread] = {}
        self.index_failures: dict[tuple, str] = {}
        self._index_lock = threading.Lock()

    def where(self) -> dict:
        """The actor's node id, process id and resident memory (``process_memory``)."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "shard": self.shard, **process_memory(os.getpid())}  # fmt: skip

    def _open(self, query: ShardQuery) -> ShardGallery:
        if self._generation != query.generation or self._gallery is None:
            manifest = _fetch(query.manifest_ref[0])
            start, stop = shard_bounds(manifest.rows, self.shards)[self.shard]
            self._gallery = ShardGallery(manifest, start, stop)
            self._generation = query.generation
            with self._index_lock:  # a build of the old generation still running is dropped
                self._keys, self._indexes = {}, OrderedDict()
                self.index_failures = {}
        return self._gallery

    def _features(self, gallery: ShardGallery, query: ShardQuery) -> KeyMatrix:
        stamp = (query.generation, query.entry_name)
        keys = self._keys.get(stamp)
        if keys is None:
            entry = _fetch(query.entry_ref[0])
            keys = shard_keys(gallery.manifest.folder, entry, gallery.start, gallery.stop)
            self._keys[stamp] = keys
        return keys

    def rank(self, query: ShardQuery) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(archive rows, scores, image ids, candidates): this shard's top k of its eligible
        rows, best first, ties by image id."""
        gallery = self._open(query)
        if len(gallery) == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, np.empty(0), empty, 0
        mask = eligible_mask(gallery, query.filters, query.finding, query.exclusions,
                             gallery.start)  # fmt: skip
        candidates = int(mask.sum())
        k = min(query.k, candidates)
        keys = self._features(gallery, query)
        ranked = None
        if k > 0 and query.index_kind != "none" and len(gallery) >= query.index_min_rows:
            ranked = self._rank_by_index(gallery, keys, query, mask, k)
        if ranked is None:
            ranked = rank_exactly(keys, query.vector, query.offset, mask, candidates, k,
                                  gallery.image_ids, query.threads)[:2]  # fmt: skip
        rows, scores = ranked
        return rows + gallery.start, scores, gallery.image_ids[rows], candidates

    def _rank_by_index(self, gallery, keys, query: ShardQuery, mask, k):
        """(rows, scores) from the entry's ANN index, or None while it is being built (or when
        its build failed): the caller then ranks exactly. The first call starts the build."""
        stamp = (query.generation, query.entry_name, query.index_kind)
        with self._index_lock:
            index = self._indexes.get(stamp)
            if index is not None:
                self._indexes.move_to_end(stamp)
            elif stamp in self._builds or stamp in self.index_failures:
                return None
        if index is None:
            geometry = _fetch(query.geometry_ref[0])  # type: ignore[index]
            build = threading.Thread(
                target=self._build_index,
                args=(stamp, geometry, keys.array, max(1, query.index_entries)),
                name=f"chexretrieve-shard{self.shard}-{query.index_kind}",
                daemon=True,
            )
            with self._index_lock:
                self._builds[stamp] = build
            build.start()
            return None
        vector = np.asarray(query.vector, dtype=np.float32)[None, :]
        found, rows = index.search(vector, k, allowed=mask)
        valid = rows[0] >= 0
        rows, scores = rows[0][valid], found[0][valid].astype(np.float64) + query.offset
        order = np.lexsort((gallery.image_ids[rows], -scores))
        return rows[order], scores[order]

    def _build_index(self, stamp: tuple, geometry, features, keep: int) -> None:
        try:
            from chexretrieve.ann import AnnConfig, build_index  # FAISS: only when asked for

            index = build_index(geometry, features, config=AnnConfig(kind=stamp[2]))
            with self._index_lock:
                if stamp[0] == self._generation:  # not an archive the shard has moved past
                    self._indexes[stamp] = index
                    while len(self._indexes) > keep:
                        self._indexes.popitem(last=False)
        except Exception as exc:  # noqa: BLE001 - the shard goes on exactly; the reason is kept
            with self._index_lock:
                self.index_failures[stamp] = f"{type(exc).__name__}: {exc}"
            logger.warning("shard %d: building a %s index failed (%s); it ranks exactly",
                           self.shard, stamp[2], exc)  # fmt: skip
        finally:
            with self._index_lock:
                self._builds.pop(stamp, None)

    def wait_for_indexes(self, timeout_s: float | None = None) -> dict:
        """Block until the index builds started so far have ended; what the shard then holds:
        ``built`` (entries with an index), ``failed`` (entry -> reason)."""
        with self._index_lock:
            builds = list(self._builds.values())
        for build in builds:
            build.join(timeout_s)
        with self._index_lock:
            failed = {name: why for (_, name, _), why in self.index_failures.items()}
            built = [name for _, name, _ in self._indexes]
            return {"shard": self.shard, "building": len(self._builds), "built": built,
                    "failed": failed}  # fmt: skip


def shard_keys(folder, entry: dict, start: int, stop: int) -> KeyMatrix:
    """Rows [start, stop) of an entry's feature file as a KeyMatrix scanned in place, their
    blocks verified against the entry's record first."""
    record = RowFileRecord.from_dict(entry["file"])
    mapped = MappedRows(folder, record)
    mapped.verify(start, stop)
    return KeyMatrix.mapped(mapped.path, HEADER_BYTES + start * record.row_bytes, stop - start,
                            int(entry["width"]), record.width, entry["dtype"])  # fmt: skip


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """ValueError in one sentence when ``address`` ("HOST:PORT" or "ray://HOST:PORT") is not
    a listening TCP endpoint; None, "auto" and "local" are Ray's to resolve."""
    if address in (None, "", "auto", "local"):
        return
    host, _, port = str(address).removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            f"the Ray address {address!r} is not HOST:PORT (such as 10.0.0.5:6379 or "
            "ray://10.0.0.5:10001)"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ValueError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); start its head "
            "there (`ray start --head`) or correct --ray-address"
        ) from None


def process_memory(pid: int) -> dict[str, int]:
    """Bytes of a process's resident memory from /proc: ``rss`` (VmRSS), ``anon`` (RssAnon:
    its own) and ``file`` (RssFile: mapped file pages, shared through the page cache); zeros
    when it is gone."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}
    found = dict.fromkeys(fields.values(), 0)
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                name = fields.get(line.split(":")[0] + ":")
                if name is not None:
                    found[name] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return found


def _fetch(ref):
    import ray

    return ray.get(ref)


def merge_top_k(parts, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows, scores, candidates) of the best k of the shards' answers by (score descending,
    image id ascending): the single-process search's order."""
    rows = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in parts])
    scores = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in parts])
    ids = np.concatenate([np.asarray(p[2], dtype=np.int64) for p in parts])
    candidates = sum(int(p[3]) for p in parts)
    order = np.lexsort((ids, -scores))[: min(int(k), candidates)]
    return rows[order], scores[order], candidates


class RaySearchBackend:
    """The driver's side: starts the shard actors on first use and ranks searches with them."""

    def __init__(self, index, config: ShardedSearchConfig, search: SearchConfig | None = None):
        self.index = index  # chexretrieve.index.ArchiveIndex: whose entries the shards scan
        self.config = config
        self.search_config = search or SearchConfig()
        self._lock = threading.Lock()
        self._actors: list = []
        self._refs: dict[tuple, list] = {}

    # ------------------------------------------------------------------------- cluster
    def connect(self) -> None:
        """Join the cluster (``ShardedSearchConfig.ray_address``, else ``$RAY_ADDRESS``, else a
        local Ray) and start one actor per shard; ValueError in one sentence when it cannot."""
        try:
            import ray
        except ImportError:
            raise ValueError(
                "the Ray search backend needs Ray: pip install 'chexretrieve[scale]'"
            ) from None
        with self._lock:
            if self._actors:
                return
            address = self.config.ray_address or os.environ.get("RAY_ADDRESS")
            if not ray.is_initialized():
                check_reachable(address)  # ray.init retries an absent head for minutes
                env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
                try:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False,
                             runtime_env={"env_vars": env} if env else None)  # fmt: skip
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    raise ValueError(
                        f"cannot reach the Ray cluster at {address or 'a new local instance'} "
                        f"for the Ray search backend ({type(exc).__name__}: {first[:160]}); "
                        "check --ray-address and that `ray start` runs there"
                    ) from None
            self._actors = [self._start(ray, shard) for shard in range(self.config.shards)]

    def _start(self, ray, shard: int):
        options: dict = {"num_cpus": 0, "max_restarts": 1, "max_task_retries": 1}
        if self.config.pin_resource:
            options["resources"] = {f"{self.config.pin_resource}{shard}": 0.01}
        actor = ray.remote(ShardRanker).options(**options)
        return actor.remote(shard, self.config.shards)

    def placement(self) -> list[dict]:
        """Where each shard's actor runs: node id, process id, resident memory."""
        import ray

        self.connect()
        return ray.get([actor.where.remote() for actor in self._actors],
                       timeout=self.config.timeout_s)  # fmt: skip

    def wait_for_indexes(self, timeout_s: float | None = None) -> list[dict]:
        """Block until every shard's ANN index builds started so far have ended (tests,
        benchmarks); each shard's ``ShardRanker.wait_for_indexes`` answer."""
        import ray

        self.connect()
        return ray.get([actor.wait_for_indexes.remote(timeout_s) for actor in self._actors])

    def close(self) -> None:
        """End the actors (the cluster itself is not this process's to stop)."""
        import ray

        with self._lock:
            for actor in self._actors:
                ray.kill(actor)
            self._actors, self._refs = [], {}

    def _ref(self, key: tuple, value) -> list:
        import ray

        found = self._refs.get(key)
        if found is None:
            if len(self._refs) > 64:
                self._refs.clear()
            found = self._refs[key] = [ray.put(value)]
        return found

    # -------------------------------------------------------------------------- search
    def rank(self, service, request, spec, anchor_set, gallery, query, own_row, top_k):
        """(rows, scores, candidates) of ``request`` ranked by the shards, or None when it
        ranks in the service's own process (feedback, no index gallery, entry not built)."""
        manifest = getattr(gallery, "manifest", None)
        if manifest is None or request.relevant or request.not_relevant:
            return None
        geometry, key = service.fitted_geometry(spec, anchor_set)
        name, entry = self.index.served_entry(gallery, key)
        if entry is None or int(entry["file"]["rows"]) != len(gallery):
            return None
        import ray

        self.connect()
        vector, offset = service.query_vector(geometry, None, query, request, gallery)
        finding = canonical_finding(request.finding)
        search = self.search_config
        job = ShardQuery(
            generation=manifest.generation,
            manifest_ref=self._ref(("manifest", manifest.generation), manifest),
            entry_name=f"{name}:{entry['file']['file']}",
            entry_ref=self._ref(("entry", manifest.generation, name, entry["file"]["file"]), entry),
            vector=np.asarray(vector, dtype=np.float32),
            offset=float(offset),
            k=int(top_k),
            filters=request.filters,
            finding=finding,
            exclusions=service.exclusions(request, gallery, own_row),
            index_kind=search.index_kind,
            index_min_rows=search.index_min_gallery // self.config.shards,
            geometry_ref=self._ref(("geometry", key), geometry)
            if search.index_kind != "none" else None,
            index_entries=search.index_cache_entries,
            threads=1,
        )  # fmt: skip
        calls = [actor.rank.remote(job) for actor in self._actors]
        try:
            parts = ray.get(calls, timeout=self.config.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ValueError(
                f"the search's shards did not all answer within {self.config.timeout_s:g} s "
                "(a Ray node is down or overloaded); search again or use --search-backend local"
            ) from None
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, ValueError):  # IndexDamaged and bad requests, said as such
                raise cause from None
            raise ValueError(f"a shard of the Ray search backend failed: {cause}") from None
        return merge_top_k(parts, top_k)


def ray_backend(index, search: SearchConfig) -> RaySearchBackend:
    """The backend ``SearchConfig.sharding`` asks for over ``index`` (not connected yet)."""
    if index is None:
        raise ValueError(
            "the Ray search backend ranks shards of the archive index, and this archive has "
            "none; build it (`chexretrieve index build`) or use --search-backend local"
        )
    return RaySearchBackend(index, search.sharding, search)
