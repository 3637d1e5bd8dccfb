"""Evaluation tests run BLAS single-threaded (many small matrices: EvaluationPlan.blas_threads)."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread():
    with threadpool_limits(1):
        yield
