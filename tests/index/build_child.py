"""An index build in its own process, for the kill -9 tests (tests/index/test_index_kill.py).

    python build_child.py STORE_URL INDEX_FOLDER [STOP_AT]

Chunks are small (1,000 archive rows, 1,000 feature rows, a checkpoint every 2,000), so a small
store has several checkpoints. Every progress report is printed as ``progress WHAT DONE TOTAL``;
with STOP_AT = ``WHAT:DONE`` the process stops (sleeps) right after that report, for the parent to
kill it there.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = "1"


def main() -> None:
    from index_fixtures import ENCODER_ID

    from chexretrieve.density.config import DensityConfig
    from chexretrieve.encoders.stand_in import StandInEncoder
    from chexretrieve.index import IndexBuilder, IndexConfig, entries
    from chexretrieve.search.sources import StoreAnchorProvider
    from chexretrieve.store import open_store

    entries.ROW_CHUNK = 1000
    entries.CHECKPOINT_ROWS = 2000
    url, folder = sys.argv[1], Path(sys.argv[2])
    stop = sys.argv[3] if len(sys.argv) > 3 else None

    def progress(what: str, done: int, total: int) -> None:
        print(f"progress {what.replace(' ', '_')} {done} {total}", flush=True)
        if stop == f"{what.replace(' ', '_')}:{done}":
            print("stopped", flush=True)
            time.sleep(600)

    store = open_store(url)
    anchors = StoreAnchorProvider(store, StandInEncoder(dim=32))
    config = IndexConfig(chunk_rows=1000, density=True)
    builder = IndexBuilder(folder, store, ENCODER_ID, anchors, config,
                           density=DensityConfig(candidates=(1, 2)), progress=progress)  # fmt: skip
    manifest = builder.build(findings=("Pleural Effusion", "Edema", "Cardiomegaly"))
    print(f"done {manifest.generation}", flush=True)


if __name__ == "__main__":
    main()
