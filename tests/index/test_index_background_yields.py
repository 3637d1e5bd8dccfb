"""The index's background check of its files yields to searches (chexretrieve.search.foreground):
a block checked from a background thread waits while a search runs, and not longer than the
limit; a search's own checks never wait; a real search marks itself."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from chexretrieve.index.rowfile import MappedRows, forget_verified, write_rows
from chexretrieve.search import foreground
from chexretrieve.search.foreground import FOREGROUND

HANG_GUARD_S = 60  # a hang guard only: the waits below end as soon as their condition holds


@pytest.fixture
def mapped(tmp_path):
    rows = np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32)
    record = write_rows(tmp_path, "rows.0001.npy", rows)  # 4 MB: four blocks of 1 MB
    assert len(record.blocks) == 4
    forget_verified()
    yield MappedRows(tmp_path, record)
    forget_verified()


def _background_check(mapped, done: threading.Event) -> threading.Thread:
    def check():
        with FOREGROUND.yielding():
            mapped.verify()
        done.set()

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    return thread


def test_a_background_check_waits_for_the_search_then_checks_every_block(mapped, monkeypatch):
    monkeypatch.setattr(foreground, "YIELD_LIMIT_S", HANG_GUARD_S)  # waits for the search only
    done = threading.Event()
    with FOREGROUND.searching():
        thread = _background_check(mapped, done)
        assert not done.wait(0.5)  # still waiting: a search runs
        assert mapped._done == {}  # and no block was checked meanwhile
    assert done.wait(HANG_GUARD_S)
    thread.join(HANG_GUARD_S)
    assert len(mapped._done) == len(mapped.record.blocks)


def test_a_search_that_never_ends_delays_each_block_at_most_the_limit(mapped, monkeypatch):
    monkeypatch.setattr(foreground, "YIELD_LIMIT_S", 0.01)
    done = threading.Event()
    with FOREGROUND.searching():
        _background_check(mapped, done).join(HANG_GUARD_S)
        assert done.is_set() and len(mapped._done) == 4  # checked while the search still ran


def test_checks_made_by_a_search_itself_never_wait(mapped, monkeypatch):
    monkeypatch.setattr(foreground, "YIELD_LIMIT_S", HANG_GUARD_S)
    done = threading.Event()

    def search():
        with FOREGROUND.searching():
            mapped.verify()  # not a background thread: no wait, though a search runs
        done.set()

    with FOREGROUND.searching():
        thread = threading.Thread(target=search, daemon=True)
        thread.start()
        assert done.wait(HANG_GUARD_S)
    thread.join(HANG_GUARD_S)
    assert len(mapped._done) == 4


def test_the_search_service_marks_each_search_as_running(monkeypatch):
    """SearchService.search holds FOREGROUND.searching() for the whole search."""
    from chexretrieve.search.service import SearchService

    seen = []

    def inner(self, request, user):
        seen.append(FOREGROUND._running)
        return "result"

    monkeypatch.setattr(SearchService, "_search", inner)
    service = SearchService.__new__(SearchService)  # only search() runs: nothing else needed
    assert service.search("request") == "result"
    assert seen == [1] and FOREGROUND._running == 0
