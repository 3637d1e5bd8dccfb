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
# the audit trail's HMAC key and, where a test names none, its log: a throw-away folder per test
# run (subprocesses inherit both; removed when the run ends), never the user's own
# ~/.config/chexretrieve/audit.key nor ~/.local/state/chexretrieve/audit.jsonl (a log signed with
# one run's key would be refused by every later run's)
if not os.environ.get("CHEXRETRIEVE_AUDIT_KEY"):
    import atexit
    import tempfile

    _audit_folder = tempfile.mkdtemp(prefix="chexretrieve-audit-key-")
    atexit.register(shutil.rmtree, _audit_folder, ignore_errors=True)
    os.environ["CHEXRETRIEVE_AUDIT_KEY"] = os.path.join(_audit_folder, "audit.key")
    os.environ.setdefault("CHEXRETRIEVE_AUDIT_LOG", os.path.join(_audit_folder, "audit.jsonl"))
# a developer's imported report corpora must not join the posterior prior of the tests
os.environ["CHEXRETRIEVE_PRIVATE_ANCHORS"] = "/dev/null/no-private-anchors"

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


# -------------------------------------------------------------------------- speed-independence
# No test may depend on machine speed (issue 16): Hypothesis' per-example deadline (200 ms by
# default) and its "data generation too slow" health check both fail on a busy machine, so both
# are off for every test, including ones added later.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "chexretrieve", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("chexretrieve")
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass


# -------------------------------------------------------------------------- one PostgreSQL server
def _postgres_server_module():  # noqa: ANN202
    """tests/scale/scale_postgres_server.py, loaded by path (one copy per session)."""
    import importlib.util
    import sys
    from pathlib import Path

    name = "chexretrieve_tests_postgres_server"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent / "scale" / "scale_postgres_server.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def postgres_server():
    """One throw-away PostgreSQL 15 server for the whole run (store and scale tests share it:
    initdb and start-up cost seconds); each test gets its own database through ``postgres_url``."""
    servers = _postgres_server_module()
    require_binary(str(servers.PG_BIN / "initdb"))
    require_binary(str(servers.PG_BIN / "pg_ctl"))
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require(False, "the psycopg driver (pip install 'psycopg[binary]')")
    server = servers.PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """SQLAlchemy URL of a fresh, empty database on the session's server."""
    return postgres_server.create_database()


# -------------------------------------------------------------------------- one kill -9 experiment
@pytest.fixture(scope="session")
def kill_resume_run(tmp_path_factory):
    """kill -9 during ingest five times, then resume and re-run: run once per session and asserted
    on by tests/ingest/test_ingest_resume.py and tests/adversarial/test_adv_kill.py
    (tests/ingest/kill_resume.py says what is done and recorded)."""
    import sys
    from pathlib import Path

    ingest_tests = str(Path(__file__).resolve().parent / "ingest")
    if ingest_tests not in sys.path:
        sys.path.insert(0, ingest_tests)
    from kill_resume import run_kill_resume

    return run_kill_resume(tmp_path_factory.mktemp("kill-resume"))
