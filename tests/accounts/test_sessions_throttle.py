"""Sign-in state kept in the store (issue 33): the throttle against a naive reference, attempts
reserved before the check (threads and processes at once, SQLite and PostgreSQL), sessions and
their ends, the password policy's strength estimate, and the docs' numbers against the code."""

from __future__ import annotations

import multiprocessing
import re
import threading
from pathlib import Path

import pytest

from chexretrieve.accounts.book import AccountBook
from chexretrieve.accounts.config import AccessConfig
from chexretrieve.accounts.sessions import SessionBook, token_hash
from chexretrieve.accounts.throttle import LoginThrottle, delay_after
from chexretrieve.store import open_store
from chexretrieve.store.access_state import AccessState

DOCS = Path(__file__).resolve().parents[2] / "docs"

GOOD = "correct-horse-battery"


def _reference_waits(n: int, free: int, first: float, longest: float) -> list[float]:
    """The n-th failure's wait, written out by hand: none before the free-th, then first, 2x..."""
    waits = []
    wait = 0.0
    for failure in range(1, n + 1):
        if failure == free:
            wait = first
        elif failure > free:
            wait = min(longest, wait * 2)
        waits.append(wait)
    return waits


def test_the_throttle_follows_the_reference_and_refuses_while_waiting(store):
    now = [1_000.0]
    config = AccessConfig(user_free_failures=3, client_free_failures=100, first_delay_s=2.0,
                          max_delay_s=60.0, failure_memory_s=3600.0)  # fmt: skip
    throttle = LoginThrottle(AccessState(store), config, clock=lambda: now[0])
    expected = _reference_waits(10, 3, 2.0, 60.0)
    seen, refused = [], []
    for _ in range(10):
        attempt = throttle.reserve("Ana", "10.0.0.1")
        assert attempt.allowed
        seen.append(throttle.failed(attempt))
        if seen[-1]:
            early = throttle.reserve("ANA ", "10.0.0.7")  # the same name, any case, any address
            refused.append(early.allowed)
            assert early.wait_s == pytest.approx(seen[-1])
        now[0] += seen[-1] + 0.01
    assert seen == pytest.approx(expected)
    assert refused and not any(refused)
    assert [delay_after(n, 3, 2.0, 60.0) for n in range(1, 11)] == pytest.approx(expected)
    assert throttle.failures("ana") == 10  # the refused attempts were not counted
    now[0] += 3601
    assert throttle.reserve("ana", "10.0.0.1").allowed  # a quiet hour: starts again from 0
    assert throttle.failures("ana") == 1


def test_the_docs_number_of_free_failures_is_the_codes(store):
    """docs/accounts-and-access.md says how many failures of one name are checked: exactly that
    many wrong passwords are checked, and the next attempt (the right one too) waits."""
    text = (DOCS / "accounts-and-access.md").read_text(encoding="utf-8")
    found = re.search(r"(\d+) failures of one name\s+\(`AccessConfig.user_free_failures`\)", text)
    assert found, "the docs no longer say how many failures of one name are checked"
    documented = int(found.group(1))
    config = AccessConfig()
    assert config.user_free_failures == documented
    throttle = LoginThrottle(AccessState(store), config)
    checked = 0
    while (attempt := throttle.reserve("bo", f"10.1.0.{checked}")).allowed and checked < 50:
        checked += 1
        throttle.failed(attempt)
    assert checked == documented
    assert not throttle.reserve("bo", "10.9.9.9").allowed


def test_a_success_clears_the_name_but_not_the_addresss_other_failures(store):
    config = AccessConfig(user_free_failures=5, client_free_failures=4)
    throttle = LoginThrottle(AccessState(store), config)
    for name in ("x1", "x2"):
        throttle.failed(throttle.reserve(name, "10.0.0.5"))
    mine = throttle.reserve("mallory", "10.0.0.5")  # an account of one's own, signing in
    throttle.succeeded(mine)
    assert throttle.failures(client="10.0.0.5") == 2  # not reset by the attacker's own success
    assert throttle.failures("mallory") == 0
    throttle.failed(throttle.reserve("x3", "10.0.0.5"))
    last = throttle.reserve("x4", "10.0.0.5")  # the 4th counted attempt locks the address
    assert last.allowed
    throttle.succeeded(last)  # ... but it signed in: its own lock is lifted, its count given back
    assert throttle.failures(client="10.0.0.5") == 3 and throttle.wait_s("y", "10.0.0.5") == 0


def _reserve_many(url: str, name: str, n: int, results) -> None:  # noqa: ANN001
    """n threads reserving an attempt for ``name`` at the same moment (a process of its own)."""
    from chexretrieve.store.access_state import open_access_state

    state = open_access_state(url)
    throttle = LoginThrottle(state, AccessConfig())
    start = threading.Barrier(n)
    allowed = []

    def one(i: int) -> None:
        start.wait()
        allowed.append(throttle.reserve(name, f"10.2.{i}.{id(state) % 250}").allowed)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state.close()
    results.put(sum(allowed))


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_parallel_attempts_from_two_processes_are_each_counted(tmp_path, database, request):
    """2 processes x 8 threads guess one name at once: exactly user_free_failures are let
    through to a password check, whatever the interleaving."""
    if database == "postgresql":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    open_store(url).close()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_reserve_many, args=(url, "ana", 8, results)) for _ in "ab"]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    allowed = results.get(timeout=10) + results.get(timeout=10)
    assert all(w.exitcode == 0 for w in workers)
    assert allowed == AccessConfig().user_free_failures


def test_sessions_end_idle_too_old_disabled_and_by_the_account_commands(store):
    now = [5_000.0]
    config = AccessConfig(session_idle_s=600, session_max_age_s=3600)
    state = AccessState(store)
    sessions = SessionBook(state, config, clock=lambda: now[0])
    ended = []
    book = AccountBook(store, config, on_sessions_ended=lambda *a: ended.append(a))
    book.add("ana", "radiologist", GOOD)
    book.add("bo", "radiologist", GOOD)
    token = sessions.start("ana", "10.0.0.1")
    assert sessions.check(token).user == "ana" and sessions.check(token).role == "radiologist"
    dump = "\n".join(store.engine.raw_connection().iterdump())
    assert token not in dump and token_hash(token) in dump  # only its hash is stored
    now[0] += 599
    assert sessions.check(token).user == "ana"  # a request within the idle time ...
    now[0] += 599
    assert sessions.check(token).user == "ana"  # ... keeps it alive
    now[0] += 601
    idle = sessions.check(token)
    assert idle.user is None and idle.ended == "idle" and idle.owner == "ana"
    assert sessions.check(token).ended is None  # gone from the store
    busy = sessions.start("ana", None)
    for _ in range(8):
        now[0] += 500
        last = sessions.check(busy)
    assert last.user is None and last.ended == "max age"
    for change, reason in (
        (lambda: book.set_password("ana", "another-long-secret"), "password changed"),
        (lambda: book.set_role("ana", "curator"), "role changed"),
        (lambda: book.disable("ana"), "account disabled"),
    ):
        tokens = [sessions.start("ana", "10.0.0.1") for _ in range(3)]
        other = sessions.start("bo", "10.0.0.2")
        change()
        assert all(sessions.check(t).user is None for t in tokens), reason
        assert sessions.check(other).user == "bo"
        assert ended[-1] == ("ana", reason, 3)
    book.enable("ana")
    kept = sessions.start("ana", None)
    gone = [sessions.start("ana", None) for _ in range(2)]
    assert sessions.end_all("ana", keep=kept) == 2
    assert sessions.check(kept).user == "ana" and not any(sessions.check(t).user for t in gone)
    assert sessions.check("not-a-token!").user is None and sessions.check(None).user is None
    AccountBook(store).table.change("bo", disabled=True)  # straight in the table: no hook ran
    assert sessions.check(other).ended == "account disabled"  # the next request ends it


@pytest.mark.parametrize(
    ("name", "password", "why"),
    [
        ("ana", "password12345", "similar to a commonly used password"),
        ("ana", "123456789012", "similar to a commonly used password"),
        ("ana", "Password1234", "Capitalization doesn't help"),
        ("ana.smith", "ana.smithana.smith", "Repeats like"),
        ("ana", "chexretrieve2026", "built from the user name or the site"),
        ("ana", "qwertyuiop12", "too easy to guess"),
    ],
)
def test_weak_passwords_are_refused_saying_why(store, name, password, why):
    with pytest.raises(ValueError, match="too easy to guess") as refused:
        AccountBook(store).add(name, "radiologist", password)
    assert why in str(refused.value)
    assert AccountBook(store).list() == []


def test_the_site_words_are_context_for_the_estimate(store, tmp_path):
    """The site's name is a word an attacker tries first: a password made of it passes at
    another site and is refused here, saying so (``$CHEXRETRIEVE_SITE_NAME`` for `users`)."""
    AccountBook(store).add("bo", "radiologist", "kingsbridgehospital")  # fine for another site
    config = AccessConfig(site_words=("Kingsbridge Hospital",))
    with pytest.raises(ValueError, match="built from the user name or the site"):
        AccountBook(store, config).add("cy", "radiologist", "kingsbridgehospital")
    from typer.testing import CliRunner

    from chexretrieve.cli import app

    url = f"sqlite:///{tmp_path / 'site.sqlite'}"
    refused = CliRunner().invoke(
        app, ["users", "add", "dee", "--password-stdin", "--db", url],
        input="kingsbridgehospital\n", env={"CHEXRETRIEVE_SITE_NAME": "Kingsbridge Hospital"},
    )  # fmt: skip
    assert refused.exit_code == 2 and "built from the user name or the site" in refused.output
