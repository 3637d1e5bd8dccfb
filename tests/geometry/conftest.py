"""Geometry tests run their (small) linear algebra on one BLAS thread.

With several test processes sharing two cores, multi-threaded OpenBLAS on 50-500-dimensional
matrices spends most of its time waiting for its own threads (an SVD of 256 x 512 went from 0.1 s to
3 s); one thread is faster for matrices this size and keeps the tests' runtime steady.
"""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    with threadpool_limits(limits=1, user_api="blas"):
        yield
