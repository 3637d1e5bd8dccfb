"""Sign-in and sessions attacked over HTTP against real `serve --accounts` processes (issue 33).

Each finding of issue 33 (but 5) as an outsider would try it: the right password sent as
multipart or JSON after the name was locked out, 16 guesses for one name at once, a stolen
session after `users passwd`, `role` and `disable`, sign-ins missing from the audit trail, the
session cookie's SameSite, weak passwords, hostile queue bodies; and two server processes on one
store (SQLite, PostgreSQL) sharing a lockout, a session and its revocation, across a restart.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import adv_serve as serve
import adv_server as srv
import pytest

from chexretrieve.accounts.book import AccountBook
from chexretrieve.accounts.config import AccessConfig
from chexretrieve.store import open_store

pytestmark = [
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
#: one account per test (a lockout of one never spills into another)
PASSWORDS = {
    "rad": srv.PASSWORD["rad"], "ana": "ana-password-long", "bo": "bo-password-long",
    "cy": "cy-password-long", "dee": "dee-password-long", "eve": "eve-password-long",
    "fay": "fay-password-long", "ivy": "ivy-password-long",
}  # fmt: skip
FREE = AccessConfig().user_free_failures
#: the servers' first lockout (`serve --lockout-s`): long enough that no check below depends on
#: how fast this machine answers (a hang guard, never a speed assertion)
LOCKOUT = ("--lockout-s", "600")
JSON = {"Content-Type": "application/json"}


def _add_accounts(db_url: str) -> None:
    store = open_store(db_url)
    book = AccountBook(store)
    for name, password in PASSWORDS.items():
        if book.table.get(name) is None:
            book.add(name, "radiologist", password)
    store.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    built = srv.make_world(tmp_path_factory.mktemp("adv-signin"))
    _add_accounts(built["db_url"])
    yield built
    srv.restore(built)


@pytest.fixture(scope="module")
def server(world):
    served = serve.wait_ready(serve.start(world["root"], world["db_url"], "a", LOCKOUT))
    yield served
    served.stop()


def _records(world, action: str | None = None) -> list[dict]:
    path = world["audit"]
    lines = path.read_text().splitlines() if path.exists() else []
    found = [json.loads(line) for line in lines]
    return [r for r in found if action is None or r["action"] == action]


def test_after_a_lockout_no_body_type_or_route_signs_in(server, cases):
    """Finding 1: ana's name locked by FREE wrong form posts; the right password then sent as
    multipart (what Gradio's page sends), JSON, a form, to /login/, from another address: each
    answered 429, nothing signs in; other methods and body types are no way around."""
    attacker = serve.client(server.base, "127.0.0.21")
    codes = [serve.sign_in(attacker, "ana", f"wrong-{i}").status_code for i in range(FREE + 3)]
    cases.check(f"exactly {FREE} failures checked before the wait (the docs' number)",
                codes == [400] * FREE + [429] * 3, str(codes))  # fmt: skip
    victim = serve.client(server.base, "127.0.0.22")  # the name is locked from anywhere
    tries = {body: serve.sign_in(victim, "ana", PASSWORDS["ana"], body)
             for body in ("multipart", "json", "form")}  # fmt: skip
    right = {"username": "ana", "password": PASSWORDS["ana"]}
    tries["form to /login/"] = victim.post("login/", data=right)
    tries["upper-case name"] = serve.sign_in(victim, "ANA", PASSWORDS["ana"], "multipart")
    for how, answer in tries.items():
        cases.check(f"right password as {how} after the lockout: 429", answer.status_code == 429,
                    f"{answer.status_code} {answer.text[:100]}")  # fmt: skip
    others = {
        "PUT": victim.put("login", data=right),
        "text/plain": victim.post(
            "login",
            content=f"username=ana&password={PASSWORDS['ana']}",
            headers={"Content-Type": "text/plain"},
        ),  # fmt: skip
        "no type": victim.post("login", content=b"username=ana"),
        "percent-encoded /login": victim.post("%6Cogin", data=right),
        "double-encoded /login": victim.post("%256Cogin", data=right),
        "a file part": victim.post(
            "login", files={"username": ("u.txt", b"ana"), "password": ("p.txt", b"x")}
        ),  # fmt: skip
    }
    for how, answer in others.items():
        cases.check(f"{how}: refused before any check, never 200", answer.status_code in
                    (400, 404, 405, 413, 415, 422, 429), str(answer.status_code))  # fmt: skip
    signed = any(a.status_code == 200 for a in [*tries.values(), *others.values()])
    assert codes[:FREE] == [400] * FREE and codes[FREE] == 429 and not signed
    assert all(a.status_code == 429 for a in tries.values())


def test_parallel_guesses_are_each_counted_and_hashing_is_bounded(server, cases):
    """Finding 2: 16 wrong passwords for bo at the same moment, each from its own connection:
    at most FREE are checked, the rest 429. Then 24 sign-ins of unknown names from 24 addresses
    at once: the server's memory rises by at most a few argon2id hashes (64 MiB each)."""
    start = threading.Barrier(16)

    def guess(i: int) -> int:
        session = serve.client(server.base, f"127.0.1.{i + 1}")
        start.wait()
        return serve.sign_in(session, "bo", f"guess-{i}", "multipart").status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(guess, range(16)))
    checked = codes.count(400)
    cases.check("16 parallel guesses: at most FREE checked", checked <= FREE, str(codes))
    cases.check("the others answered 429", codes.count(429) == 16 - checked, str(codes))
    cases.figure("16 parallel guesses for one name: checked / 429", f"{checked} / 16")
    right = serve.sign_in(serve.client(server.base, "127.0.1.99"), "bo", PASSWORDS["bo"])
    cases.check("the right password waits too", right.status_code == 429, str(right.status_code))

    flood = threading.Barrier(24)
    rss_before = serve.memory_kib(server.pid, "VmRSS")
    reset = serve.peak_rss_reset(server.pid)

    def stranger(i: int) -> int:
        session = serve.client(server.base, f"127.0.2.{i + 1}")
        flood.wait()
        return serve.sign_in(session, f"nobody{i}", "not-the-password").status_code

    with ThreadPoolExecutor(24) as pool:
        strangers = list(pool.map(stranger, range(24)))
    peak = serve.memory_kib(server.pid, "VmHWM" if reset else "VmRSS")
    rise_mib = max(0, peak - rss_before) / 1024
    hashes = getattr(AccessConfig(), "max_concurrent_hashes", 4)
    bound_mib = (hashes + 2) * 64
    cases.check("24 strangers at once: each answered (400, or 503 busy)",
                set(strangers) <= {400, 503}, str(strangers))  # fmt: skip
    cases.check(f"memory rise at most {bound_mib} MiB (bounded password checks)",
                rise_mib <= bound_mib, f"{rise_mib:.0f} MiB")  # fmt: skip
    cases.figure("24 parallel sign-ins: resident memory rise (MiB)", round(rise_mib))
    assert checked <= FREE and right.status_code == 429 and rise_mib <= bound_mib


def test_passwd_role_and_disable_end_a_stolen_session_at_once(server, world, cases):
    """Finding 3: cy signs in; a thief copies the cookie to another machine. `users passwd`,
    then `role`, then `disable` each end every open session at the next request."""
    results = {}
    for command, extra in (("passwd", ["--password-stdin"]), ("role", ["curator"]),
                           ("disable", [])):  # fmt: skip
        victim = serve.signed_in(server.base, "cy", PASSWORDS["cy"], "127.0.0.31")
        thief = serve.client(server.base, "127.0.0.32")
        thief.cookies.update(victim.cookies)
        before = (victim.get("config").status_code, thief.get("config").status_code)
        stdin = PASSWORDS["cy"] + "\n" if command == "passwd" else None
        ran = serve.cli("users", command, "cy", *extra, "--db", world["db_url"],
                        stdin=stdin)  # fmt: skip
        after = (victim.get("config").status_code, thief.get("config").status_code)
        results[command] = (before, after, ran.returncode, ran.stderr)
        ok = before == (200, 200) and after == (401, 401) and ran.returncode == 0
        cases.check(f"users {command}: the live session and its stolen copy end", ok,
                    f"{before} -> {after} {ran.stderr[-200:]}")  # fmt: skip
        cases.check(f"users {command} says how many sessions ended",
                    "open session(s) of cy ended" in ran.stderr, ran.stderr[-200:])  # fmt: skip
    serve.cli("users", "enable", "cy", "--db", world["db_url"])
    assert all(r[1] == (401, 401) for r in results.values()), results


def test_sign_ins_lockouts_and_sign_outs_are_in_the_audit_trail(server, world, cases):
    """Finding 4: a success, failures with the name as typed, a lockout, a sign-out and a
    sign-out everywhere are audit records naming the address and outcome; the trail verifies
    and `audit export` picks them out."""
    typed = "Dee <img src=x>"
    session = serve.client(server.base, "127.0.0.41")
    serve.sign_in(session, typed, "not-it")
    for i in range(FREE):
        serve.sign_in(session, "eve", f"wrong-{i}")
    good = serve.signed_in(server.base, "dee", PASSWORDS["dee"], "127.0.0.42")
    other = serve.signed_in(server.base, "dee", PASSWORDS["dee"], "127.0.0.43")
    good.get("logout", params={"everywhere": "1"})
    after = other.get("config").status_code
    sign_ins = _records(world, "sign_in")
    failed_typed = [r for r in sign_ins if r["user"] == typed and r["outcome"] == "failed"]
    success = [r for r in sign_ins if r["user"] == "dee" and r["outcome"] == "signed_in"]
    lockouts = [r for r in _records(world, "lockout") if r["user"] == "eve"]
    outs = [r for r in _records(world, "sign_out") if r["user"] == "dee"]
    revoked = [r for r in _records(world, "session_revoked") if r["user"] == "dee"]
    checks = {
        "a failure names the name as typed, the address, the reason": bool(failed_typed)
        and failed_typed[-1]["client"] == "127.0.0.41"
        and failed_typed[-1]["reason"] == "not a user name",
        "each success names the user, its address and a session id": len(success) >= 2
        and {r["client"] for r in success} >= {"127.0.0.42", "127.0.0.43"}
        and all(len(r["session"]) == 12 for r in success),
        "the lockout after FREE failures is recorded": len(lockouts) == 1
        and lockouts[0]["failures"] == FREE
        and lockouts[0]["key"] == "user name",
        "the sign-out everywhere is recorded": bool(outs) and outs[-1]["scope"] == "everywhere",
        "the other session's end is a revocation": bool(revoked)
        and revoked[-1]["sessions"] == 1
        and after == 401,
    }
    verified = serve.cli("audit", "verify")
    exported = serve.cli("audit", "export", "--action", "sign_in", "--outcome", "failed",
                         "--client", "127.0.0.41")  # fmt: skip
    picked = [json.loads(line) for line in exported.stdout.splitlines()]
    checks["`audit verify` passes"] = verified.returncode == 0
    checks["`audit export --action sign_in --outcome failed --client` picks exactly them"] = (
        exported.returncode == 0
        and len(picked) == FREE + 1
        and all(r["outcome"] == "failed" for r in picked)
    )
    for name, ok in checks.items():
        cases.check(name, ok, verified.stdout[-200:] + exported.stderr[-200:])
    assert all(checks.values()), checks


def test_the_session_cookie_is_httponly_and_samesite(server, cases):
    """Finding 6: the only cookie a sign-in sets is HttpOnly and SameSite=Lax (never None, no
    Gradio cookie); a sign-in or sign-out sent by another site's page is refused."""
    session = serve.client(server.base, "127.0.0.51")
    answer = serve.sign_in(session, "fay", PASSWORDS["fay"], "multipart")
    cookies = answer.headers.get_list("set-cookie")
    attributes = [c.lower() for c in cookies]
    checks = {
        "one session cookie": len(cookies) == 1,
        "HttpOnly": all("httponly" in c for c in attributes),
        "SameSite=Lax": all("samesite=lax" in c for c in attributes),
        "no SameSite=None, no Gradio access-token cookie": not any(
            "samesite=none" in c or c.startswith("access-token") for c in attributes
        ),
        "no Secure flag over plain HTTP (the browser would drop it)": not any(
            "secure" in c.replace("__host-", "") for c in attributes
        ),
    }
    forged = serve.client(server.base, "127.0.0.52")
    cross = forged.post("login", data={"username": "fay", "password": PASSWORDS["fay"]},
                        headers={"Origin": "https://evil.example"})  # fmt: skip
    fetch = forged.post("login", data={"username": "fay", "password": PASSWORDS["fay"]},
                        headers={"Sec-Fetch-Site": "cross-site"})  # fmt: skip
    logout = session.get("logout", headers={"Sec-Fetch-Site": "cross-site"})
    still = session.get("config").status_code
    checks["login from another site's page (Origin): 403"] = cross.status_code == 403
    checks["login from another site's page (Sec-Fetch-Site): 403"] = fetch.status_code == 403
    checks["logout from another site's page: refused, the session lives"] = (
        logout.status_code == 403 and still == 200
    )
    for name, ok in checks.items():
        cases.check(name, ok, str(cookies))
    assert all(checks.values()), (checks, cookies)


#: weak passwords and what the refusal must say (zxcvbn's reasons)
WEAK = {
    "password12345": "commonly used", "123456789012": "commonly used",
    "Password1234": "commonly used", "zoe.smithzoe.smith": "Repeats",
    "chexretrieve-2026": "too easy to guess", "qwertyuiop123": "too easy to guess",
}  # fmt: skip


def test_weak_passwords_are_refused_saying_why(world, cases):
    """Finding 6: `users add` and `users passwd` refuse passwords zxcvbn finds easy to guess,
    the user name twice and the application's name included, and say why."""
    from typer.testing import CliRunner

    from chexretrieve.cli import app

    runner = CliRunner()
    refused = {}
    for password, why in WEAK.items():
        added = runner.invoke(app, ["users", "add", "zoe.smith", "--password-stdin", "--db",
                                    world["db_url"]], input=password + "\n")  # fmt: skip
        changed = runner.invoke(app, ["users", "passwd", "ivy", "--password-stdin", "--db",
                                      world["db_url"]], input=password + "\n")  # fmt: skip
        ok = all(r.exit_code == 2 and why in r.output and "too easy to guess" in r.output
                 for r in (added, changed))  # fmt: skip
        refused[password] = ok
        cases.check(f"{password!r} refused by add and passwd, saying why", ok,
                    (added.output + changed.output)[-300:])  # fmt: skip
    assert all(refused.values()), refused


def _fuzz_bodies(index: int) -> dict[str, bytes]:
    good = {"data": [], "fn_index": index, "session_hash": "abc123def45", "trigger_id": None}
    variants = {
        "unknown fn_index": {**good, "fn_index": 99_999},
        "negative fn_index": {**good, "fn_index": -1},
        "huge fn_index": {**good, "fn_index": 2**70},
        "fn_index as text": {**good, "fn_index": "1"},
        "fn_index true": {**good, "fn_index": True},
        "fn_index null": {**good, "fn_index": None},
        "data not a list": {**good, "data": {"a": 1}},
        "no data": {k: v for k, v in good.items() if k != "data"},
        "no session_hash": {k: v for k, v in good.items() if k != "session_hash"},
        "session_hash a number": {**good, "session_hash": 5},
        "session_hash with a path": {**good, "session_hash": "../../etc"},
        "session_hash 10k long": {**good, "session_hash": "a" * 10_000},
        "trigger_id text": {**good, "trigger_id": "x"},
        "batched text": {**good, "batched": "yes"},
        "event_id a list": {**good, "event_id": [1]},
    }
    bodies = {name: json.dumps(body).encode() for name, body in variants.items()}
    bodies.update({"not JSON": b"{fn_index: 1", "a JSON list": b"[1, 2]", "empty": b"",
                   "deep nesting": b"[" * 100_000 + b"]" * 100_000,
                   "bad UTF-8": b'{"fn_index": "\xff"}'})  # fmt: skip
    return bodies


def test_unknown_or_malformed_queue_calls_get_4xx_and_no_traceback(server, cases):
    """Finding 6: hostile bodies on the event queue's join and cancel routes, signed in: each
    answered 4xx (no 500, no reset connection), no traceback in the server's log, and the page's
    own events still work afterwards."""
    session = serve.signed_in(server.base, "rad", PASSWORDS["rad"], "127.0.0.61")
    index = srv.fn_index(session, "load-case", "click")
    log_before = len(server.log_text())
    answers = {}
    for route in ("gradio_api/queue/join", "gradio_api/cancel"):
        for name, body in _fuzz_bodies(index).items():
            try:
                code = session.post(route, content=body, headers=JSON).status_code
            except serve.httpx.HTTPError as exc:  # a reset connection
                code = type(exc).__name__
            answers[f"{route} {name}"] = code
    for name, code in answers.items():
        cases.check(f"{name}: 4xx", isinstance(code, int) and 400 <= code < 500, str(code))
    time.sleep(1)  # the log of a failing request is written after its answer
    log = server.log_text()[log_before:]
    cases.check("no traceback in the server's log", "Traceback" not in log, log[-600:])
    status, message = srv.call(session, *srv.opening(session, "3", "Pleural Effusion"))
    works = status == 200 and message.get("success", True) and bool(message)
    cases.check("the page's own event still works", works, str(message)[:200])
    bad = {n: c for n, c in answers.items() if not (isinstance(c, int) and 400 <= c < 500)}
    assert not bad and "Traceback" not in log and works, (bad, log[-2000:])


def _two_processes_share(root, db_url: str, cases, label: str, first=None) -> None:  # noqa: ANN001
    """Two servers on one store: a lockout made through A holds on B; a session signed in
    through B works on A; (with ``first``, the module's server as A) the session and the lockout
    outlive a restart of B; `users sign-out` ends the session on both."""
    a = first or serve.start(root, db_url, f"{label}-a", LOCKOUT)
    b = serve.start(root, db_url, f"{label}-b", LOCKOUT)
    started = [b] if first else [a, b]
    try:
        serve.wait_ready(a), serve.wait_ready(b)
        guesser = serve.client(a.base, "127.0.3.1")
        codes = [serve.sign_in(guesser, "eve", f"wrong-{i}").status_code for i in range(FREE)]
        on_b = serve.sign_in(serve.client(b.base, "127.0.3.2"), "eve", PASSWORDS["eve"],
                             "multipart")  # fmt: skip
        session = serve.signed_in(b.base, "dee", PASSWORDS["dee"], "127.0.3.3")
        on_a = serve.client(a.base, "127.0.3.3")
        on_a.cookies.update(session.cookies)
        shared = (session.get("config").status_code, on_a.get("config").status_code)
        checks = {
            f"{FREE} failures through A lock the name on B": codes == [400] * FREE
            and on_b.status_code == 429,
            "a session signed in through B works on A": shared == (200, 200),
        }
        if first is not None:
            b.stop()
            b = serve.wait_ready(serve.start(root, db_url, f"{label}-b2", LOCKOUT))
            started.append(b)
            fresh_b = serve.client(b.base, "127.0.3.3")
            fresh_b.cookies.update(session.cookies)
            checks["the session outlives a restart of B"] = fresh_b.get("config").status_code == 200
            relocked = serve.sign_in(serve.client(b.base, "127.0.3.4"), "eve", PASSWORDS["eve"])
            checks["the lockout outlives a restart of B"] = relocked.status_code == 429
            session = fresh_b
        ended = serve.cli("users", "sign-out", "dee", "--db", db_url)
        after = (session.get("config").status_code, on_a.get("config").status_code)
        checks["`users sign-out` ends it on both"] = ended.returncode == 0 and after == (401, 401)
        for name, ok in checks.items():
            cases.check(f"{label}: {name}", ok, f"{codes} {on_b.status_code} {shared} {after}")
        assert all(checks.values()), (checks, a.log_text()[-1500:], b.log_text()[-1500:])
    finally:
        for process in started:
            process.stop()


def test_two_processes_on_one_sqlite_store_share_lockouts_and_sessions(server, world, cases):
    srv.forget_sign_ins(world)
    _two_processes_share(world["root"], world["db_url"], cases, "SQLite", first=server)


def test_two_processes_on_one_postgresql_store_share_lockouts_and_sessions(
    world, postgres_url, cases
):
    from chexretrieve.encoders.stand_in import load_stand_in
    from chexretrieve.ingest.config import IngestConfig
    from chexretrieve.ingest.labels import read_label_csv
    from chexretrieve.ingest.pipeline import ingest_paths

    archive = world["root"] / "phantom"
    store = open_store(postgres_url)
    ingest_paths([archive], store, load_stand_in("stand-in"), IngestConfig(workers=0),
                 labels=read_label_csv(archive / "labels.csv"))  # fmt: skip
    store.close()
    _add_accounts(postgres_url)
    _two_processes_share(world["root"], postgres_url, cases, "PostgreSQL")
