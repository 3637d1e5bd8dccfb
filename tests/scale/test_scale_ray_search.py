"""The Ray search backend on a local cluster of three Ray nodes ranks exactly as the
single-process search: the same image ids in the same order, the same scores and candidate counts,
for several geometries, with filters and the query's own study (and an upload's) excluded; and
the real `serve --search-backend ray`, driven in Chromium, shows that ranking on screen.

The cluster (``ray start --head`` and two ``ray start --address`` workers) runs in a private
network namespace that has only its loopback (Ray advertises the host's interface otherwise); each
node offers a custom resource ``shardK`` so that shard K's actor runs on node K, and the test
checks that the three actors ran on three distinct node ids. The driver runs in the namespace too
(``scale_ray_search_job.py``); the reference answers are computed here, in this process, by the
local backend over the same store and index. Every process of the namespace is killed by PID and
the namespace deleted afterwards (``ray stop`` would end other users' Ray processes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "index"))
from index_fixtures import make_store, stand_in  # noqa: E402
from scale_ray_search_job import ANN_CASES, answers, app_config, cases  # noqa: E402

pytestmark = [pytest.mark.service, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
PORT = 6380  # inside the private namespace: nothing else listens there
SHARDS = 3
N = 1500


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


class RayClusterInNamespace:
    """A head and ``workers`` worker nodes in a fresh network namespace."""

    def __init__(self, root: Path, workers: int):
        self.root, self.workers = root, workers
        self.name = f"chexray-{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen] = []
        # not the RAY_* variables an earlier in-process ray.init left in os.environ (it sets
        # RAY_AUTH_MODE=token, and a cluster started with it wants a token this one never made)
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env = {**inherited, "HOME": str(root), "RAY_USAGE_STATS_ENABLED": "0"}

    def run(self, *command: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.name, *command], env=self.env,
                              capture_output=True, text=True, **kwargs)  # fmt: skip

    def start(self) -> RayClusterInNamespace:
        added = subprocess.run(["ip", "netns", "add", self.name], capture_output=True, text=True)
        if added.returncode != 0:
            pytest.skip(f"`ip netns add` is unavailable here ({added.stderr.strip()})")
        try:
            self.run("ip", "link", "set", "lo", "up", check=True)
            common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--block",
                      "--object-store-memory=100000000", "--disable-usage-stats"]  # fmt: skip
            self._node("--head", f"--port={PORT}", "--include-dashboard=false",
                       f"--temp-dir={self.root / 't'}", *common)  # fmt: skip
            for _ in range(self.workers):  # one at a time: each registered before the next
                self._node(f"--address=127.0.0.1:{PORT}", *common)
        except BaseException:
            self.stop()
            raise
        return self

    def _node(self, *args: str) -> None:
        """Node k offers resource shardK; its ports are its own (every node shares 127.0.0.1:
        Ray's fixed default agent ports would collide)."""
        k = len(self.procs)
        base = 21000 + 1000 * k
        ports = [f"--node-manager-port={base + 1}", f"--object-manager-port={base + 2}",
                 f"--dashboard-agent-listen-port={base + 3}", f"--metrics-export-port={base + 4}",
                 f"--runtime-env-agent-port={base + 5}", f"--dashboard-agent-grpc-port={base + 6}",
                 f"--min-worker-port={base + 100}", f"--max-worker-port={base + 199}"]  # fmt: skip
        log_path = self.root / f"node-{k}.log"
        log = open(log_path, "w")  # noqa: SIM115 - the node writes it until it ends
        self.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", self.name, _ray_bin(), "start", *args, *ports,
             f'--resources={{"shard{k}": 1}}'],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        ))  # fmt: skip
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log_path.read_text():
            if time.monotonic() > deadline or self.procs[-1].poll() is not None:
                raise AssertionError(f"Ray node {k} did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)

    def pids(self) -> list[int]:
        found = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True)
        return [int(p) for p in found.stdout.split()]

    def stop(self) -> None:
        """SIGTERM then SIGKILL every process in the namespace, by PID; delete the namespace."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@pytest.fixture(scope="module")
def world():
    pytest.importorskip("ray", reason="Ray is in the 'scale' and 'dev' extras")
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) is not installed: no network namespace for the Ray cluster")
    root = Path(tempfile.mkdtemp(prefix="rs-"))  # short: Ray's socket paths must fit 107 bytes
    patch = pytest.MonkeyPatch()
    patch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    cluster = None
    try:
        store = make_store(root / "archive.sqlite", N)
        stand_in()
        store.close()
        spec = {"db": f"sqlite:///{root / 'archive.sqlite'}", "features": str(root / "features"),
                "dtype": "float16", "shards": SHARDS, "pin": "shard",
                "address": f"127.0.0.1:{PORT}"}  # fmt: skip
        from chexretrieve.app import open_search_app

        local = answers(open_search_app(app_config(spec, "local")).service)  # builds the index
        cluster = RayClusterInNamespace(root, SHARDS - 1).start()
        (root / "spec.json").write_text(json.dumps(spec))
        job = cluster.run(sys.executable, str(HERE / "scale_ray_search_job.py"),
                          str(root / "spec.json"), str(root / "out.json"), timeout=300)  # fmt: skip
        nodes = "".join(f"\n{log.name}: " + log.read_text()[-1500:] for log in root.glob("node-*"))
        assert job.returncode == 0, job.stderr[-3000:] + nodes
        remote = json.loads((root / "out.json").read_text())
        # `serve --search-backend ray` in a browser, in the namespace too (after the job above,
        # whose actors ended with it)
        shown = root / "browser.json"
        job = cluster.run(sys.executable, str(HERE / "scale_ray_serve_job.py"),
                          str(root / "spec.json"), str(shown), timeout=400)  # fmt: skip
        assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
        remote["browser"] = json.loads(shown.read_text())
        yield local, remote, spec["db"]
    finally:
        if cluster is not None:
            cluster.stop()
            assert not cluster.pids(), "Ray processes were left in the test's namespace"
        patch.undo()
        shutil.rmtree(root, ignore_errors=True)


def test_shards_ran_on_three_distinct_nodes(world) -> None:
    _, remote, _ = world
    placement = remote["placement"]
    assert sorted(p["shard"] for p in placement) == list(range(SHARDS))
    nodes = {p["node_id"] for p in placement}
    assert len(nodes) == SHARDS and nodes <= set(remote["nodes"])
    assert all(p["rss"] > 0 for p in placement)


@pytest.mark.parametrize("name", [name for name, _ in cases()])
def test_ray_backend_ranks_exactly_as_the_single_process_search(world, name) -> None:
    local, remote, _ = world
    want, got = local[name], remote["answers"][name]
    assert want["ids"], "a comparison of empty rankings proves nothing"
    assert got["ids"] == want["ids"]
    assert got["candidates"] == want["candidates"]
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-6, atol=1e-9)


def test_serve_with_the_ray_backend_shows_the_same_ranking_in_a_browser(world) -> None:
    """The real `serve --search-backend ray`, a case opened in Chromium: the cards on screen
    name the single-process search's top 12 (the UI's default finding, geometry and top k), in
    its order, and the title the same candidate count."""
    local, remote, _ = world
    shown, want = remote["browser"], local["softmax-case"]
    assert shown.get("cards"), shown.get("log")
    assert [rank for rank, _ in shown["cards"]] == list(range(1, 13)), shown["cards"]
    assert [case for _, case in shown["cards"]] == want["ids"][:12], shown["log"]
    assert f"{shown['finding']} · Softmax" in shown["title"], shown["title"]
    assert f"{want['candidates']:,} candidate cases" in shown["title"], shown["title"]
    assert "query: case 7" in shown["title"]
    assert "Connected to Ray cluster" in shown["log"], shown["log"]  # not the local backend


def test_hnsw_per_shard_finds_most_of_the_exact_top_k_with_exact_scores(world) -> None:
    """An HNSW index per shard (SearchConfig.index_kind): approximate, so its top k is compared
    with the exact one by recall; every score it returns is the exact score of that image. The
    searches before the shards' indexes are built are answered exactly, without waiting."""
    local, remote, _ = world
    for name in ANN_CASES:
        want, first = local[name], remote["hnsw_while_built"][name]
        assert first["ids"] == want["ids"] and first["candidates"] == want["candidates"]
        np.testing.assert_allclose(first["scores"], want["scores"], rtol=1e-6, atol=1e-9)
    built = remote["hnsw_built"]
    assert sorted(state["shard"] for state in built) == list(range(len(built)))
    for state in built:  # each shard built one index per searched entry, none failed
        assert state["building"] == 0 and state["failed"] == {}, state
        assert len(state["built"]) == len(ANN_CASES), state
    found = wanted = 0
    for name in ANN_CASES:
        want, got = local[name], remote["hnsw"][name]
        exact = dict(zip(want["ids"], want["scores"], strict=True))
        assert len(got["ids"]) == len(want["ids"]) and got["candidates"] == want["candidates"]
        found += len(set(got["ids"]) & set(exact))
        wanted += len(exact)
        for image_id, score in zip(got["ids"], got["scores"], strict=True):
            if image_id in exact:
                assert score == pytest.approx(exact[image_id], rel=1e-5, abs=1e-6)
        assert got["scores"] == sorted(got["scores"], reverse=True)
    assert found / wanted >= 0.9


def test_own_study_and_exclusions_are_applied_in_the_shards(world) -> None:
    from chexretrieve.search.sources import gallery_from_store
    from chexretrieve.store import open_store

    _, remote, db = world
    with open_store(db) as store:
        gallery = gallery_from_store(store, stand_in().encoder_id)
    studies = gallery.metadata["study_uid"]
    own = set(studies.index[studies == studies.loc[7]])  # case 7's study: 2 images
    upload = set(studies.index[studies == "1.2.826.0.8.10"])
    assert len(own) == 2 and 7 in own and len(upload) == 2
    for geometry in ("softmax", "gaussian"):
        assert not own & set(remote["answers"][f"{geometry}-case"]["ids"])
    assert not (upload | {3, 500, 1499}) & set(remote["answers"]["upload"]["ids"])


@pytest.mark.parametrize(
    ("backend", "address", "said"),
    [
        ("ray", "127.0.0.1:{port}", "cannot reach the Ray cluster at 127.0.0.1:{port} ("),
        ("ray", "head-node", "the Ray address 'head-node' is not HOST:PORT"),
        ("spark", None, "unknown search backend 'spark'; choose one of: local, ray"),
    ],
)
def test_a_bad_backend_setting_is_refused_in_one_sentence(tmp_path, monkeypatch, backend,
                                                          address, said) -> None:  # fmt: skip
    import socket

    from typer.testing import CliRunner

    from chexretrieve.cli import app

    pytest.importorskip("ray", reason="Ray is in the 'scale' and 'dev' extras")
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    make_store(tmp_path / "archive.sqlite", 40).close()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["search", "--db", f"sqlite:///{tmp_path / 'archive.sqlite'}", "--encoder",
               "stand-in:0:32", "--finding", "Edema", "--case", "3",
               "--search-backend", backend]  # fmt: skip
    if address:
        command += ["--ray-address", address.format(port=port)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert message.startswith("error: ") and said.format(port=port) in message
    assert message.count(". ") == 0 and "Traceback" not in result.output  # one sentence
