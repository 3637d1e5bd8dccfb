"""Shared bits of the adversarial suite: the root conftest's ``require`` and small helpers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def _root_conftest():  # noqa: ANN202
    """tests/conftest.py under the same module name the scale tests use (loaded once)."""
    name = "chexretrieve_tests_root_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


require = _root_conftest().require
require_binary = _root_conftest().require_binary
