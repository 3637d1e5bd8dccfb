"""Accounts: argon2id hashes, the password policy, roles and `chexretrieve users` (sessions and
throttling: test_sessions_throttle.py)."""

from __future__ import annotations

import pytest
from argon2.low_level import Type, verify_secret
from typer.testing import CliRunner

from chexretrieve.accounts import AccessConfig, AccessRefused, may, require
from chexretrieve.accounts.book import AccountBook
from chexretrieve.cli import app
from chexretrieve.store import open_store

GOOD = "correct-horse-battery"


def test_passwords_are_stored_as_argon2id_and_verify(store):
    book = AccountBook(store)
    book.add("ana", "curator", GOOD)
    stored = book.table.get("ana").password_hash
    assert stored.startswith("$argon2id$v=19$") and GOOD not in stored
    # the library's low-level verifier (not our wrapper) accepts it as argon2id
    assert verify_secret(stored.encode(), GOOD.encode(), Type.ID)
    assert book.authenticate("ana", GOOD).role == "curator"
    assert book.authenticate("ana", GOOD + "x") is None
    assert book.authenticate("nobody", GOOD) is None
    assert book.authenticate("../etc", GOOD) is None
    second = AccountBook(store)
    second.add("bob", "radiologist", GOOD)
    assert second.table.get("bob").password_hash != stored  # a fresh salt per hash


@pytest.mark.parametrize(
    ("name", "password", "message"),
    [
        ("ana", "ab", "at least 12 characters"),
        ("ana", "elevenchars", "at least 12 characters"),
        ("ana", "x" * 2000, "at most 1024"),
        ("analyst-12345", "ANALYST-12345", "must not be the user name"),
        ("ana", "aaaaaaaaaaaaaaa", "4 different characters"),
        ("a b", GOOD, "a user name is"),
        ("", GOOD, "a user name is"),
    ],
)
def test_bad_names_and_passwords_are_refused(store, name, password, message):
    with pytest.raises(ValueError, match=message):
        AccountBook(store).add(name, "radiologist", password)
    assert AccountBook(store).list() == []


def test_disable_enable_role_and_passwd(store):
    book = AccountBook(store)
    book.add("ana", "radiologist", GOOD)
    assert book.active_role("ana") == "radiologist"
    book.disable("ana")
    assert book.authenticate("ana", GOOD) is None and book.active_role("ana") is None
    book.enable("ana")
    book.set_role("ana", "admin")
    assert book.active_role("ana") == "admin"
    book.set_password("ana", "another-long-secret")
    assert book.authenticate("ana", GOOD) is None
    assert book.authenticate("ana", "another-long-secret") is not None
    with pytest.raises(ValueError, match="exists already"):
        book.add("ana", "curator", GOOD)
    with pytest.raises(ValueError, match="no user named"):
        book.disable("zed")
    with pytest.raises(ValueError, match="unknown role"):
        book.set_role("ana", "root")


def test_role_matrix():
    expected = {
        "radiologist": {"search", "view"},
        "curator": {"search", "view", "edit_anchor_sets"},
        "admin": {"search", "view", "edit_anchor_sets", "manage_accounts", "export_audit"},
    }
    actions = {"search", "view", "edit_anchor_sets", "manage_accounts", "export_audit"}
    for role, allowed in expected.items():
        assert {a for a in actions if may(role, a)} == allowed
    assert not any(may(None, a) or may("root", a) for a in actions)
    with pytest.raises(AccessRefused, match="needs the curator role; ana is signed in as radiol"):
        require("radiologist", "edit_anchor_sets", "ana")
    require("curator", "edit_anchor_sets", "ana")


def test_users_commands_read_passwords_from_stdin_never_argv(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEXRETRIEVE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    runner = CliRunner()
    added = runner.invoke(app, ["users", "add", "ana", "--role", "curator", "--password-stdin",
                                "--db", url], input=GOOD + "\n")  # fmt: skip
    assert added.exit_code == 0, added.output
    short = runner.invoke(app, ["users", "add", "bob", "--password-stdin", "--db", url],
                          input="short\n")  # fmt: skip
    assert short.exit_code == 2 and "at least 12 characters" in short.output
    prompted = runner.invoke(app, ["users", "add", "cy", "--db", url],
                             input=f"{GOOD}\n{GOOD}x\n")  # fmt: skip
    assert prompted.exit_code == 2 and "the two passwords differ" in prompted.output
    assert runner.invoke(app, ["users", "disable", "ana", "--db", url]).exit_code == 0
    listed = runner.invoke(app, ["users", "list", "--db", url])
    assert "ana\tcurator\tpassword\tdisabled" in listed.output and "$argon2" not in listed.output
    changed = runner.invoke(app, ["users", "passwd", "ana", "--password-stdin", "--db", url],
                            input="a-new-long-password\n")  # fmt: skip
    assert changed.exit_code == 0, changed.output
    assert "0 open session(s) of ana ended (password changed)" in changed.output
    revoked = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines()
               if '"session_revoked"' in line]  # fmt: skip
    assert len(revoked) == 2 and '"reason":"password changed"' in revoked[-1]
    store = open_store(url)
    book = AccountBook(store)
    book.enable("ana")
    assert book.authenticate("ana", "a-new-long-password") is not None
    store.close()
    env = runner.invoke(app, ["users", "add", "dee", "--role", "admin", "--password-env",
                              "ADMIN_PW", "--db", url], env={"ADMIN_PW": GOOD})  # fmt: skip
    assert env.exit_code == 0, env.output
    again = runner.invoke(app, ["users", "add", "dee", "--password-env", "ADMIN_PW",
                                "--exists-ok", "--db", url], env={"ADMIN_PW": ""})  # fmt: skip
    assert again.exit_code == 0 and "left as it is" in again.output
    unset = runner.invoke(app, ["users", "add", "eli", "--password-env", "NO_SUCH_VAR_X",
                                "--db", url])  # fmt: skip
    assert unset.exit_code == 2 and "empty or unset" in unset.output
    help_text = runner.invoke(app, ["users", "add", "--help"]).output
    assert "--password " not in help_text  # no option takes the password itself


def test_access_config_refuses_a_header_without_proxies():
    with pytest.raises(ValueError, match="needs the proxies"):
        AccessConfig(trusted_header="X-Remote-User")
    with pytest.raises(ValueError, match="not an IP address"):
        AccessConfig(trusted_header="X-Remote-User", trusted_proxies=("proxy.local",))
    config = AccessConfig(trusted_header="X-Remote-User", trusted_proxies=("10.1.0.0/16",))
    assert config.is_trusted_proxy("10.1.2.3") and not config.is_trusted_proxy("10.2.0.1")
    assert not config.is_trusted_proxy(None) and not config.is_trusted_proxy("garbage")
