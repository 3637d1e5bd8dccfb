"""Accounts, roles and the routes an outsider can reach (issue 23, findings 7 and 10).

The real server (``launch_app``) with one account per role. Attacked as an outsider would over
HTTP: every handler's name on every REST route Gradio has for handlers (run, call, api), signed in
and not; the anchor-set save through the page's own event queue as a radiologist; 300 wrong
passwords in a row; a session idle too long or of a disabled account; the SSO header from a
client that is not the proxy; `chexretrieve users` with a short password; plain HTTP warnings.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time

import adv_server as srv
import pytest
from net_ports import free_port
from typer.testing import CliRunner

from chexretrieve.accounts.book import AccountBook
from chexretrieve.accounts.config import AccessConfig
from chexretrieve.cli import app as cli
from chexretrieve.store import open_store
from chexretrieve.ui.curation import CurationDesk, set_as_text

pytestmark = [
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
]
#: what app data looks like in an answer
DATA_MARKERS = ("Pleural", "PHA", "case 1", "study", "anchor", "Saved")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    built = srv.make_world(tmp_path_factory.mktemp("adv-access"))
    yield built
    srv.restore(built)


@pytest.fixture(scope="module")
def site(world):
    # a 10 min first lockout: no check below depends on how fast this machine answers
    app, base = srv.launch(world, access=AccessConfig(first_delay_s=600.0))
    yield {"app": app, "base": base, "access": app.case_lookup_access}
    app.close(verbose=False)


def _anchor_files(world) -> set[str]:
    return {str(p.relative_to(world["anchors"])) for p in world["anchors"].rglob("*.yaml")}


def _handler_names(app) -> set[str]:
    names = {"save_version", "load_case", "load_upload", "run_search", "select_result",
             "open_query", "show_page", "show_set", "impact", "page_loaded", "lambda",
             "false", "false_1", "false_2", "handler", "mark", "finding_changed"}  # fmt: skip
    for fn in app.fns.values():
        names.update(str(n) for n in (fn.name, fn.api_name) if n)
    return {n for n in names if n.replace("_", "").replace("-", "").isalnum()}


def test_no_handler_is_a_rest_endpoint_signed_in_or_not(site, world, cases):
    """Finding 7: /gradio_api/run|call|api/<name> for every handler: refused, nothing written."""
    before = _anchor_files(world)
    names = sorted(_handler_names(site["app"]))
    routes = ["gradio_api/run/{}", "gradio_api/call/{}", "gradio_api/call/v2/{}",
              "gradio_api/api/{}", "run/{}", "api/{}", "call/{}"]  # fmt: skip
    # a save that the handler would accept (the set shown, one line added): a real attack
    _, save = _save_request(srv.client(site["base"], "cur"), world)
    bodies = {"save_version": {"data": save}, "load_case": {"data": ["1", "Pleural Effusion"]}}
    leaks = []
    for who in (None, "rad", "cur"):
        session = srv.client(site["base"], who)
        for name in names:
            for route in routes:
                path = route.format(name)
                answer = session.post(path, json=bodies.get(name, {"data": []}))
                text = answer.text
                ok = answer.status_code in (401, 403, 404, 405) and not any(
                    m in text for m in DATA_MARKERS
                )
                if not ok:
                    leaks.append((who, path, answer.status_code, text[:80]))
        for path in ("gradio_api/info", "gradio_api/openapi.json", "openapi.json",
                     "gradio_api/mcp/schema", "gradio_api/mcp/sse", "monitoring"):  # fmt: skip
            answer = session.get(path)
            if answer.status_code not in (401, 403, 404) or "named_endpoints" in answer.text:
                leaks.append((who, path, answer.status_code, answer.text[:80]))
    after = _anchor_files(world)
    cases.check("no handler answers on a REST route (anonymous, radiologist, curator)",
                not leaks, str(leaks[:5]))  # fmt: skip
    cases.check("no anchor version written through a REST route", after == before,
                str(after - before))  # fmt: skip
    cases.figure("REST handler routes probed", len(names) * len(routes) * 3)
    assert not leaks and after == before


def _save_request(session, world):  # noqa: ANN001, ANN202
    key = srv.component_props(session, "cur-set")["value"]
    text = set_as_text(CurationDesk(anchors_dir=world["anchors"]).get(key))
    text += "\n+ a forged sentence about a large effusion\n"
    # publishing writes the next version (a saved draft does not change what searches use)
    return srv.fn_index(session, "cur-publish", "click"), [key, text, "forged", "Pleural Effusion"]


def test_saving_an_anchor_version_needs_the_curator_role_on_the_server(site, world, cases):
    """Finding 7: the save event joined through the queue as a radiologist is refused by the
    handler (the page is not trusted); a curator's is saved."""
    before = _anchor_files(world)
    rad = srv.client(site["base"], "rad")
    index, data = _save_request(rad, world)
    status, message = srv.call(rad, index, data)
    refused = "needs the curator role" in srv.answer_text(message)
    unchanged = _anchor_files(world) == before
    cases.check("a radiologist's save is refused with the role it needs", status == 200 and refused,
                srv.answer_text(message)[:200])  # fmt: skip
    cases.check(
        "nothing written for the radiologist", unchanged, str(_anchor_files(world) - before)
    )
    anonymous = srv.client(site["base"])
    status_anon, _ = srv.call(anonymous, index, data)
    cases.check("the queue refuses an anonymous join", status_anon in (401, 403), str(status_anon))
    cur = srv.client(site["base"], "cur")
    status_cur, saved = srv.call(cur, index, data)
    written = _anchor_files(world) - before
    cases.check("a curator's save is written (the refusal is the role's)",
                status_cur == 200 and len(written) == 1, str(written))  # fmt: skip
    assert refused and unchanged and status_anon in (401, 403) and len(written) == 1


def test_drafts_and_reverts_need_the_curator_role_on_the_server(site, world, cases):
    """The draft and revert events joined through the queue as a radiologist are refused by the
    handler with the role they need (the page's disabled buttons are not trusted)."""
    rad = srv.client(site["base"], "rad")
    key = srv.component_props(rad, "cur-set")["value"]
    text = set_as_text(CurationDesk(anchors_dir=world["anchors"]).get(key)) + "\n+ more fluid\n"
    draft = srv.call(rad, srv.fn_index(rad, "cur-save", "click"), [key, text, "forged"])
    revert = srv.call(rad, srv.fn_index(rad, "cur-revert", "click"), [key, "Pleural Effusion"])
    for name, (status, message) in (("draft", draft), ("revert", revert)):
        refused = status == 200 and "needs the curator role" in srv.answer_text(message)
        cases.check(f"a radiologist's {name} is refused with the role it needs", refused,
                    srv.answer_text(message)[:200])  # fmt: skip
        assert refused


def test_wrong_passwords_are_throttled_per_user_and_per_client(site, world, cases):
    """Finding 10: 300 wrong sign-ins: only the first few are checked, then a growing wait; the
    right password is refused too while the wait lasts; many names from one client as well."""
    access = site["access"]
    try:
        session = srv.client(site["base"])
        started = time.monotonic()
        codes = [
            session.post("login", data={"username": "rad", "password": f"wrong-{i}"}).status_code
            for i in range(300)
        ]
        elapsed = time.monotonic() - started
        checked = codes.count(400)
        throttled = codes.count(429)
        right = session.post("login", data={"username": "rad", "password": srv.PASSWORD["rad"]})
        free = access.config.user_free_failures
        # each further check comes only after a wait of 2, 4, 8, ... s: within ``elapsed``
        first = access.config.first_delay_s
        waits_over = sum(1 for k in range(1, 20) if first * (2**k - 1) <= elapsed)
        cases.check("exactly user_free_failures checked before the first wait",
                    codes.index(429) == free, str(codes[:8]))  # fmt: skip
        cases.check("further checks only after each wait", checked <= free + waits_over,
                    f"{checked} in {elapsed:.1f} s")  # fmt: skip
        cases.check("the rest answered 429 (wait)", throttled >= 290, str(throttled))
        cases.check("the right password waits as well (lockout)", right.status_code == 429,
                    str(right.status_code))  # fmt: skip
        cases.check("the wait is said", "try again in" in right.text, right.text[:120])
        srv.forget_sign_ins(world)
        spread = [
            session.post("login", data={"username": f"user{i}", "password": "x" * 12}).status_code
            for i in range(60)
        ]
        cases.check("many names from one client: throttled after client_free_failures",
                    spread.count(400) <= access.config.client_free_failures
                    and spread.count(429) >= 30, str(spread.count(400)))  # fmt: skip
        cases.figure("300 wrong passwords: checked / throttled", f"{checked} / {throttled}")
        assert codes.index(429) == free and checked <= free + waits_over
        assert right.status_code == 429
    finally:
        srv.forget_sign_ins(world)


def test_behind_a_trusted_proxy_failures_count_per_forwarded_client(site, world, cases):
    """X-Forwarded-For names the client only when the peer is a named proxy; from anyone else
    it is ignored (forging it does not dodge the per-client count)."""
    access = site["access"]
    config = access.config
    session = srv.client(site["base"])

    def fail(forwarded: str, n: int) -> list[int]:
        return [session.post("login", headers={"X-Forwarded-For": forwarded},
                             data={"username": f"{forwarded}-{i}", "password": "x" * 12}
                             ).status_code for i in range(n)]  # fmt: skip

    try:
        srv.forget_sign_ins(world)
        forged = fail("10.0.0.1", 25) + fail("10.0.0.2", 3)  # peer 127.0.0.1 is no proxy
        ignored = forged[-3:] == [429] * 3
        access.config = AccessConfig(trusted_proxies=("127.0.0.1",), first_delay_s=600.0)
        srv.forget_sign_ins(world)
        first, second = fail("10.0.0.1", 25), fail("10.0.0.2", 3)
        counted = 429 in first and second == [400] * 3
        cases.check("X-Forwarded-For from a client that is no proxy: ignored", ignored,
                    str(forged[-4:]))  # fmt: skip
        cases.check("behind the named proxy: failures counted per forwarded client", counted,
                    f"{first.count(429)} {second}")  # fmt: skip
        assert ignored and counted
    finally:
        access.config = config
        srv.forget_sign_ins(world)


def test_the_audit_names_each_signed_in_user(site, world, cases):
    """Finding 10: two people open a case: each audit record names that person."""
    for user in ("rad", "cur"):
        session = srv.client(site["base"], user)
        status, message = srv.call(session, *srv.opening(session, "3", "Pleural Effusion"))
        assert status == 200 and message.get("success", True), message
    records = [json.loads(line) for line in world["audit"].read_text().splitlines()]
    views = [(r["user"], r.get("image")) for r in records if r["action"] == "view"]
    named = ("rad", 3) in views and ("cur", 3) in views
    cases.check("the audit names the person who opened the case", named, str(views[-4:]))
    assert named


def test_sessions_expire_and_end_when_the_account_is_disabled(site, world, cases):
    sessions = site["access"].desk.sessions
    config = sessions.config
    clock = [time.time()]
    real_clock = sessions.clock
    sessions.clock = lambda: clock[0]
    try:
        session = srv.client(site["base"], "rad")
        fresh = session.get("config").status_code
        clock[0] += config.session_idle_s + 1
        idle = session.get("config").status_code
        session = srv.client(site["base"], "rad")
        for _ in range(10):  # active all along, but longer than the longest session
            clock[0] += config.session_max_age_s / 10 + 1
            last = session.get("config").status_code
        cases.check("a fresh session works", fresh == 200, str(fresh))
        cases.check("an idle session ends", idle == 401, str(idle))
        cases.check("an active session ends at session_max_age_s", last == 401, str(last))
        sessions.clock = real_clock
        session = srv.client(site["base"], "cur")
        store = open_store(world["db_url"])
        AccountBook(store).disable("cur")
        disabled = session.get("config").status_code  # at once: the session rows are gone
        again = session.post("login", data={"username": "cur", "password": srv.PASSWORD["cur"]})
        AccountBook(store).enable("cur")
        store.close()
        cases.check("a disabled account's open session ends", disabled == 401, str(disabled))
        cases.check("a disabled account cannot sign in", again.status_code == 400,
                    str(again.status_code))  # fmt: skip
        assert (fresh, idle, last, disabled, again.status_code) == (200, 401, 401, 401, 400)
    finally:
        sessions.clock = real_clock


@pytest.mark.parametrize("trusted", [False, True], ids=["other-proxy", "this-proxy"])
def test_the_sso_header_is_believed_only_from_the_proxy(world, cases, trusted):
    proxy = "127.0.0.1" if trusted else "10.254.0.1"
    access = AccessConfig(trusted_header="X-Remote-User", trusted_proxies=(proxy,))
    app, base = srv.launch(world, sign_in="header", access=access)
    try:
        session = srv.client(base)
        named = session.get("config", headers={"X-Remote-User": "adm"})
        unknown = session.get("config", headers={"X-Remote-User": "mallory"})
        bare = session.get("config")
        # a local client posing as the proxy by X-Forwarded-For (uvicorn's default believes it)
        posing = session.get("config", headers={"X-Remote-User": "adm",
                                                "X-Forwarded-For": "10.254.0.1"})  # fmt: skip
        if trusted:
            ok = (named.status_code, unknown.status_code, bare.status_code) == (200, 401, 401)
            ok = ok and "mallory has no enabled chexretrieve account" in unknown.text
            ok = ok and unknown.headers["content-type"].startswith("text/plain")
            # the proxy's user is the audit's user and the page's
            session.headers["X-Remote-User"] = "adm"
            status, _ = srv.call(session, *srv.opening(session, "4", "Pleural Effusion"))
            audited = [json.loads(line) for line in world["audit"].read_text().splitlines()]
            ok = (
                ok
                and status == 200
                and any(r["user"] == "adm" and r.get("image") == 4 for r in audited)
            )
        else:
            ok = {named.status_code, unknown.status_code, bare.status_code,
                  posing.status_code} == {401}  # fmt: skip
        codes = f"{named.status_code} {unknown.status_code} {bare.status_code} {posing.status_code}"
        cases.check(f"SSO header from {'the' if trusted else 'another'} address", ok, codes)
        assert ok
    finally:
        app.close(verbose=False)


def test_users_add_refuses_a_short_password_and_serve_warns_about_plain_http(world, cases):
    runner = CliRunner()
    short = runner.invoke(cli, ["users", "add", "eve", "--password-stdin", "--db",
                                world["db_url"]], input="ab\n")  # fmt: skip
    cases.check("a 2-character password is refused", short.exit_code == 2
                and "at least 12 characters" in short.output, short.output[-200:])  # fmt: skip
    empty = f"sqlite:///{world['root'] / 'no-accounts.sqlite'}"
    open_store(empty).close()
    port = str(free_port())
    served = runner.invoke(cli, ["serve", "--host", "0.0.0.0", "--accounts", "--db", empty,
                                 "--encoder", "stand-in", "--port", port])  # fmt: skip
    warned = "plain HTTP on 0.0.0.0" in served.output
    no_accounts = "no enabled account" in served.output
    cases.check("plain HTTP on a non-loopback address is warned about", warned, served.output)
    cases.check("--accounts on a store without accounts: how to add one", no_accounts,
                served.output[-300:])  # fmt: skip
    assert short.exit_code == 2 and warned and no_accounts


def test_https_with_ssl_certfile_and_keyfile(world, cases, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    app, base = srv.launch(world, ssl_certfile=cert, ssl_keyfile=key)
    try:
        secure = base.replace("http://", "https://")
        with srv.httpx.Client(
            base_url=secure, verify=ssl.create_default_context(cafile=str(cert)), timeout=60
        ) as session:
            answer = session.post("login", data={"username": "rad",
                                                 "password": srv.PASSWORD["rad"]})  # fmt: skip
            config = session.get("config")
        ok = answer.status_code == 200 and config.status_code == 200
        cases.check("HTTPS served with the given certificate", ok, str(config.status_code))
        cookies = [c.lower() for c in answer.headers.get_list("set-cookie")]
        secure = bool(cookies) and all(
            c.startswith("__host-") and "; secure" in c and "samesite=lax" in c
            and "httponly" in c for c in cookies
        )  # fmt: skip
        cases.check("over TLS the session cookie is __Host-, Secure, HttpOnly, SameSite=Lax",
                    secure, str(cookies))  # fmt: skip
        assert ok and secure
    finally:
        app.close(verbose=False)
