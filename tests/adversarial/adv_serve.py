"""`chexretrieve serve --accounts` as real processes for the sign-in suite (test_adv_signin): start
one or several on a store, wait until they answer, read their logs and memory, stop them; and an
outsider's HTTP helpers (a client bound to a chosen loopback address, every body type of a
sign-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from net_ports import free_port

REPO = Path(__file__).resolve().parents[2]
#: a whole start-up (model, archive, Gradio) on a loaded 2-core machine: a hang guard only
START_TIMEOUT_S = 420


@dataclass
class Served:
    """One `serve --accounts` process."""

    process: subprocess.Popen
    base: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def environment(root: Path) -> dict:
    """The environment of every command of a test world (its audit file, no user's state)."""
    env = {
        **os.environ,
        "CHEXRETRIEVE_TEST_ENCODERS": "1",
        "PYTHONPATH": str(REPO),
        "HOME": str(root / "home"),
        "GRADIO_TEMP_DIR": str(root / "gradio"),
        "CHEXRETRIEVE_AUDIT_LOG": str(root / "audit.jsonl"),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("CHEXRETRIEVE_DB", None)
    return env


def start(root: Path, db_url: str, name: str, extra: tuple[str, ...] = ()) -> Served:
    """Start `serve --accounts` on ``db_url`` (not waiting; see ``wait_ready``)."""
    port = free_port()
    log = root / f"serve-{name}.log"
    command = [
        sys.executable, "-m", "chexretrieve", "serve", "--db", db_url, "--encoder", "stand-in",
        "--port", str(port), "--accounts", "--feature-cache", str(root / f"features-{name}"),
        "--reports", str(root / "reports"), *extra,
    ]  # fmt: skip
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, cwd=root, env=environment(root), stdout=sink, stderr=subprocess.STDOUT
        )
    scheme = "https" if "--ssl-certfile" in extra else "http"
    return Served(process, f"{scheme}://127.0.0.1:{port}/", log)


def wait_ready(served: Served, verify=True) -> Served:  # noqa: ANN001
    """Wait until the server answers its login page (AssertionError with its log if it died)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            raise AssertionError(f"serve stopped:\n{served.log_text()[-3000:]}")
        try:
            if httpx.get(served.base, timeout=5, verify=verify).status_code == 200:
                return served
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"serve did not answer in time:\n{served.log_text()[-3000:]}")


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`chexretrieve ARGS` as an administrator runs it beside the servers (in this process: the
    servers are others; the world's environment names the same audit trail)."""
    from typer.testing import CliRunner

    from chexretrieve.cli import app

    result = CliRunner().invoke(app, list(args), input=stdin)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.output)


def client(base: str, address: str = "127.0.0.1", verify=True) -> httpx.Client:  # noqa: ANN001
    """An HTTP client whose connections come from ``address`` (any 127.x.y.z on Linux)."""
    transport = httpx.HTTPTransport(local_address=address, verify=verify)
    return httpx.Client(base_url=base, timeout=120, transport=transport, verify=verify)


def sign_in(session: httpx.Client, name: str, password: str, body: str = "form") -> httpx.Response:
    """POST /login with the credentials as ``body``: "form" (urlencoded), "multipart" (what
    Gradio's page sends) or "json"."""
    fields = {"username": name, "password": password}
    if body == "multipart":
        return session.post("login", files={k: (None, v) for k, v in fields.items()})
    if body == "json":
        return session.post("login", content=json.dumps(fields),
                            headers={"Content-Type": "application/json"})  # fmt: skip
    return session.post("login", data=fields)


def signed_in(base: str, name: str, password: str, address: str = "127.0.0.1") -> httpx.Client:
    session = client(base, address)
    answer = sign_in(session, name, password)
    assert answer.status_code == 200, (answer.status_code, answer.text[:200])
    return session


def peak_rss_reset(pid: int) -> bool:
    """Reset the process's peak resident size (Linux: clear_refs 5); False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def memory_kib(pid: int, field: str) -> int:
    """``VmRSS`` / ``VmHWM`` (peak) of a process, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")
