from __future__ import annotations

import pytest

from chexretrieve.store import open_store


@pytest.fixture
def test_encoders(monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    yield opened
    opened.close()
