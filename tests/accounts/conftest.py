"""A fresh SQLite store per test."""

from __future__ import annotations

import pytest

from chexretrieve.store import open_store


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    yield opened
    opened.close()
