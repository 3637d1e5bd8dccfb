from __future__ import annotations

import pytest

from chexretrieve.store import open_store


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    opened.register_encoder("fake:a", 8, 20.0)
    opened.register_encoder("fake:b", 4, 30.0)
    yield opened
    opened.close()
