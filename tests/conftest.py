"""Shared test configuration.

Tests that need an external binary or service call ``require(...)``. Locally a missing one skips
the test; in CI (``CHEXRETRIEVE_REQUIRE_SERVICES=1``, set by ``.ci/run``) it fails, so nothing
is hidden.
"""

from __future__ import annotations

import os
import shutil

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REQUIRE_SERVICES = os.environ.get("CHEXRETRIEVE_REQUIRE_SERVICES") == "1"


def require(condition: bool, what: str) -> None:
    """Skip locally, fail in CI, when ``condition`` is false."""
    if condition:
        return
    if REQUIRE_SERVICES:
        pytest.fail(f"required for this test but missing: {what}")
    pytest.skip(f"missing: {what}")


def require_binary(path_or_name: str) -> str:
    found = shutil.which(path_or_name) or (path_or_name if os.path.exists(path_or_name) else None)
    require(found is not None, f"binary {path_or_name}")
    return found  # type: ignore[return-value]
