"""`ingest --executor ray` on a local Ray instance (2 CPUs) leaves exactly the store content of the
local executor: the same image rows, labels and embeddings, bit for bit."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from scale_helpers import make_phantom_archive, store_content
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.encoders.stand_in import StandInEncoder
from chexretrieve.ingest import IngestConfig, ingest_paths, read_label_csv
from chexretrieve.store import open_store

pytestmark = [pytest.mark.service, pytest.mark.slow]


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is in the 'scale' and 'dev' extras")
    folder = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths must fit 107 bytes
    patch = pytest.MonkeyPatch()
    patch.setenv("HOME", folder)  # Ray writes a session token under $HOME
    patch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")  # inherited by the workers
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=folder,
        object_store_memory=1_000_000_000,
        log_to_driver=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        patch.undo()
        shutil.rmtree(folder, ignore_errors=True)


def test_ray_executor_stores_exactly_what_the_local_executor_stores(local_ray, tmp_path):
    archive = make_phantom_archive(tmp_path / "archive", n=6)
    encoder = StandInEncoder(dim=16)
    labels = read_label_csv(archive / "labels.csv")
    local_url = f"sqlite:///{tmp_path / 'local.sqlite'}"
    with open_store(local_url) as store:
        config = IngestConfig(workers=1, batch_size=4)
        report = ingest_paths([archive], store, encoder, config, labels=labels)
        assert report.counts["ingested"] == 6
        local = store_content(store, encoder.encoder_id)

    ray_db = tmp_path / "ray.sqlite"
    command = f"ingest {archive} --db sqlite:///{ray_db} --encoder stand-in:0:16 --labels "
    command += f"{archive / 'labels.csv'} --executor ray --batch-size 4 --no-progress"
    result = CliRunner().invoke(app, command.split())
    assert result.exit_code == 0, result.output
    with open_store(f"sqlite:///{ray_db}") as store:
        distributed = store_content(store, encoder.encoder_id)
        runs = store.runs_frame()
        assert store.integrity_check() == []
    assert distributed.keys() == local.keys() and len(local) == 6
    assert distributed == local  # rows, labels and embedding bytes
    assert any(item.get("labels") for item in distributed.values())
    # one run per shard (2 CPUs -> 4 shards) plus the driver's run with the totals
    assert len(runs) == 5 and set(runs.status) == {"completed"}
    assert '"ingested": 6' in runs.counts_json.iloc[0]
