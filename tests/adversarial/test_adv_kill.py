"""kill -9 during ingest five times at random moments, then resume: nothing lost, nothing doubled.

Five kills guaranteed, at three kinds of moment (start-up and migrations, right after a batch
commits, anywhere inside a batch), with bad files mixed into the archive; then one resuming run,
checked for the unique count, duplicates, images without embeddings and SQLite's integrity check,
and a further run that must change nothing. The experiment is ``tests/ingest/kill_resume.py``, run
once per session by the root conftest's ``kill_resume_run`` and shared with
``tests/ingest/test_ingest_resume.py``; here each outcome is a case of the adversarial summary.
"""

from __future__ import annotations

import pytest
from kill_resume import KILLS, TABLES


@pytest.mark.slow
def test_five_kills_at_random_moments_then_resume(kill_resume_run, cases):
    run = kill_resume_run
    cases.check("five kills landed before the archive was done", run.kills == KILLS,
                str(run.moments))  # fmt: skip
    cases.figure("kills", run.kills)
    cases.figure("moments", ", ".join(run.moments))
    assert run.kills == KILLS
    assert run.stored_before_resume < run.n_good
    assert run.resume_returncode == 0, run.resume_stderr

    counts = run.resume_counts
    checks = {
        "right unique count": run.count == run.n_good,
        "no duplicate SOP UIDs or pixels": run.distinct == (run.n_good, run.n_good),
        "no image without embedding": run.without_embedding == 0,
        "store integrity_check empty": run.integrity_problems == [],
        "PRAGMA integrity_check ok": run.sqlite_check == [("ok",)],
        "bad files rejected on resume": counts["rejected"] == run.bad_files,
        "resume adds the rest": counts["ingested"] == run.n_good - run.stored_before_resume,
    }
    for name, ok in checks.items():
        cases.check(name, ok, f"count {run.count}, distinct {run.distinct}, without "
                              f"{run.without_embedding}, problems {run.integrity_problems[:3]}, "
                              f"report {counts}")  # fmt: skip
    assert all(checks.values()), checks

    unchanged = all(run.tables_after_again[t] == run.tables_after_resume[t] for t in TABLES)
    again = run.again_counts
    cases.check("a further run changes nothing",
                run.again_returncode == 0 and unchanged and again.get("ingested") == 0,
                f"{run.tables_after_resume} -> {run.tables_after_again}; {again}")  # fmt: skip
    assert run.again_returncode == 0 and unchanged
    assert again["already-present"] == run.n_good and again["ingested"] == 0

    cases.check("no orphaned decoding process", not run.orphans, str(run.orphans))
    assert not run.orphans
