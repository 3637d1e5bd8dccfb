from __future__ import annotations

import pytest


@pytest.fixture
def test_encoders(monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_TEST_ENCODERS", "1")
