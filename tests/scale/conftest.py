"""The scale tests' helpers folder on sys.path. Their PostgreSQL server (one per session, a
database per test: ``postgres_server`` / ``postgres_url``) is the root conftest's, shared with the
store tests."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
