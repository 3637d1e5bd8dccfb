"""kill -9 an ingest at random moments, resume, and check that nothing was lost or doubled.

The experiment (five kills, one resume, one more run) is ``kill_resume.run_kill_resume``, run once
per session by the root conftest's ``kill_resume_run`` and shared with
``tests/adversarial/test_adv_kill.py``, which checks it case by case.
"""

from __future__ import annotations

import pytest
from kill_resume import KILLS, TABLES


@pytest.mark.slow
def test_kill_minus_nine_at_random_moments_then_resume(kill_resume_run):
    run = kill_resume_run
    assert run.kills == KILLS, run.moments
    assert 0 < run.stored_before_resume < run.n_good, run.moments

    assert run.resume_returncode == 0, run.resume_stderr
    counts = run.resume_counts
    assert counts["ingested"] + counts["already-present"] == run.n_good
    assert counts["ingested"] == run.n_good - run.stored_before_resume > 0
    assert counts["rejected"] == run.bad_files

    assert run.count == run.n_good and run.distinct == (run.n_good, run.n_good)
    assert run.embeddings == run.n_good and run.without_embedding == 0
    assert run.integrity_problems == [] and run.sqlite_check == [("ok",)]
    # a run killed before it registered leaves no row; every other killed run is marked
    statuses = run.run_statuses
    assert statuses[-1] == "completed" and len(statuses) - 1 <= run.kills
    assert statuses[:-1] == ["interrupted"] * (len(statuses) - 1)
    # every run had the encoder on its own thread with a batch in flight (the pipelined ingest)
    assert run.pipelines == [(True, 1)] * len(statuses)

    assert run.again_returncode == 0 and run.again_counts["already-present"] == run.n_good
    assert run.again_counts["ingested"] == 0
    for table in TABLES:
        assert run.tables_after_again[table] == run.tables_after_resume[table], table
    # the decoding processes of killed runs exit on their own (their parent's pipes closed)
    assert run.orphans == []
