"""The decode pool: every task answered once, large pixels intact through reused shared memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ingest_fixtures import large_image_reader

from chexretrieve.ingest.decode_pool import Decoded, DecodePool


def shared_blocks() -> set[str]:
    folder = Path("/dev/shm")
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_large_pixels_arrive_intact_and_no_shared_block_is_left(tmp_path):
    before = shared_blocks()
    paths = [str(tmp_path / f"image-{i}.bin") for i in range(14)]
    with DecodePool(2, large_image_reader, None, timeout_s=60, tasks_per_worker=2) as pool:
        for i, path in enumerate(paths):
            pool.submit(i, path)
        answers = dict(pool.get(timeout=60) for _ in paths)
    assert sorted(answers) == list(range(14))
    for i, result in answers.items():
        assert isinstance(result, Decoded)
        expected = large_image_reader(paths[i], None)
        assert result.radiograph.label == expected.label
        np.testing.assert_array_equal(result.radiograph.pixels, expected.pixels)
    assert shared_blocks() - before == set()
