"""Readers for ingest runs in the adversarial suite (importable by decoding worker processes)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np


def hostile_reader(path, config):  # noqa: ANN001, ANN201
    """The real reader, except: ``hog*`` allocates 1 GiB (a decoder gone wild: the worker memory
    cap must stop it), ``hang*`` never returns (the per-file timeout must stop it), ``segv*``
    kills its own process the way a codec crash would."""
    from chexretrieve.dicom import read_radiograph

    name = Path(path).name
    if name.startswith("hog"):
        block = np.ones(1 << 27, dtype=np.float64)  # 1 GiB, written so it is really resident
        return block.sum()
    if name.startswith("hang"):
        time.sleep(3600)
    if name.startswith("segv"):
        os.kill(os.getpid(), 11)
    return read_radiograph(path, config)
