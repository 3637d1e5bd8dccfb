"""one_blas_thread: BLAS on one thread inside, the count it found restored after, also when holders
in several threads overlap. The count is read from OpenBLAS itself (its setter returns the previous
count), and threadpoolctl says which BLAS numpy loaded."""

from __future__ import annotations

import threading

import pytest
from threadpoolctl import threadpool_info

from chexretrieve.search.scoring import _blas_thread_setters, one_blas_thread


def _numpy_openblas_version() -> tuple[int, ...] | None:
    for lib in threadpool_info():
        if lib["internal_api"] == "openblas" and "numpy" in lib["filepath"]:
            return tuple(int(p) for p in lib["version"].split(".")[:3])
    return None


@pytest.fixture
def setter():
    """numpy's OpenBLAS setter (the library the query features run on)."""
    version = _numpy_openblas_version()
    if version is None or version < (0, 3, 27):
        pytest.skip(f"numpy's BLAS is not OpenBLAS >= 0.3.27 (found {version}): nothing to set")
    found = _blas_thread_setters()
    assert found, f"numpy's OpenBLAS {version} has openblas_set_num_threads_local"
    return found[0]


def _count(setter) -> int:
    """OpenBLAS's thread count (set to a probe value and straight back)."""
    previous = setter(3)
    setter(previous)
    return previous


def test_one_thread_inside_and_the_threads_count_back_after(setter):
    before = _count(setter)
    with one_blas_thread():
        assert _count(setter) == 1
    assert _count(setter) == before


def test_overlapping_holders_restore_the_count_they_found(setter):
    """A enters, B enters, A leaves (B still holds: one thread), B leaves (restored). A holder
    that saved and restored on its own would leave B's 1 in place for good."""
    before = _count(setter)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with one_blas_thread():
            a_in.set()
            assert b_in.wait(30)  # hang guards
        seen["after first left"] = _count(setter)
        a_out.set()

    def second():
        assert a_in.wait(30)
        with one_blas_thread():
            b_in.set()
            assert a_out.wait(30)
            seen["second still inside"] = _count(setter)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == {"after first left": 1, "second still inside": 1}
    assert _count(setter) == before


def test_an_error_inside_still_restores(setter):
    before = _count(setter)
    with pytest.raises(RuntimeError, match="inside"):
        with one_blas_thread():
            raise RuntimeError("inside")
    assert _count(setter) == before
