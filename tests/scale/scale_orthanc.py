"""A real Orthanc PACS (Debian's, with the DICOMweb plugin) inside a private network namespace.

Orthanc 1.10 always listens on 0.0.0.0, so it runs in a namespace that has nothing but its own
loopback (``unshare -n``); clients reach it by entering the namespace (``nsenter -t PID -n``).
Storage and index live in a folder that survives ``kill()`` + ``start_server()``, so a test can
take the PACS down in the middle of a transfer and bring the same archive back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ORTHANC = "/usr/sbin/Orthanc"
DICOMWEB_PLUGIN = "/usr/share/orthanc/plugins/libOrthancDicomWeb.so"
JOB = Path(__file__).with_name("scale_pacs_job.py")
PORT = 8042
TLS_PORT = 8443


class OrthancInNamespace:
    """One Orthanc on http://127.0.0.1:8042 in its own namespace; ``start_tls_proxy`` adds HTTPS
    in front of it with a self-signed certificate (``ca_bundle``)."""

    def __init__(self, root: Path, user: str = "pacs", password: str = "pacs-secret") -> None:
        self.root = root
        self.user, self.password = user, password
        self.storage = root / "orthanc-storage"
        self.config = root / "orthanc.json"
        self.log = root / "orthanc.log"
        self.ca_bundle = root / "certificate.pem"
        self.holder: subprocess.Popen | None = None
        self.server: subprocess.Popen | None = None
        self.proxy: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{PORT}"

    @property
    def https_dicomweb_url(self) -> str:
        return f"https://127.0.0.1:{TLS_PORT}/dicom-web"

    @property
    def dicomweb_url(self) -> str:
        return f"{self.url}/dicom-web"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CHEXRETRIEVE_DICOMWEB_USER=self.user,
            CHEXRETRIEVE_DICOMWEB_PASSWORD=self.password,
            CHEXRETRIEVE_TEST_ENCODERS="1",
            PYTHONPATH=str(Path(__file__).resolve().parents[2]),
        )
        env.update(extra)
        return env

    def _enter(self) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-n"]

    def start(self) -> OrthancInNamespace:
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            json.dumps(
                {
                    "Name": "chexretrieve-test",
                    "StorageDirectory": str(self.storage),
                    "IndexDirectory": str(self.storage),
                    "HttpPort": PORT,
                    "DicomServerEnabled": False,
                    "RemoteAccessAllowed": False,
                    "AuthenticationEnabled": True,
                    "RegisteredUsers": {self.user: self.password},
                    "Plugins": [DICOMWEB_PLUGIN],
                    "DicomWeb": {"Enable": True, "Root": "/dicom-web/"},
                }
            )
        )
        self.holder = subprocess.Popen(["unshare", "-n", "sleep", "infinity"])
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 60
        while os.readlink(f"/proc/{self.holder.pid}/ns/net") == own:  # unshare not done yet
            assert time.monotonic() < deadline, "unshare -n did not create a network namespace"
            time.sleep(0.01)
        try:
            subprocess.run(
                [*self._enter(), "ip", "link", "set", "lo", "up"], check=True, timeout=10
            )
            self.start_server()
        except BaseException:
            self.stop()  # never leave a server or a namespace holder behind
            raise
        return self

    def start_server(self) -> None:
        with open(self.log, "ab") as log:
            self.server = subprocess.Popen(
                [*self._enter(), ORTHANC, str(self.config)], stdout=log, stderr=log
            )
        probe = self.run_job("probe", self.url, timeout=120)
        if probe.returncode != 0:
            raise RuntimeError(
                f"Orthanc did not answer: {probe.stderr[-2000:]}\n{self.log.read_text()[-2000:]}"
            )

    def start_tls_proxy(self) -> None:
        """HTTPS on 127.0.0.1:8443 in front of Orthanc, with a fresh self-signed certificate."""
        key = self.root / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(self.ca_bundle)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        upstream = self.url
        self.proxy = subprocess.Popen(
            self.job_command("tls-proxy", str(TLS_PORT), upstream, str(self.ca_bundle), str(key)),
            env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        probe = self.run_job("probe", f"https://127.0.0.1:{TLS_PORT}", str(self.ca_bundle))
        if probe.returncode != 0:
            raise RuntimeError(f"the TLS proxy did not answer: {probe.stderr[-2000:]}")

    def kill(self) -> None:
        """SIGKILL the server (a crash, not a shutdown); the namespace stays."""
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGKILL)
            self.server.wait(10)

    def job_command(self, *args: str) -> list[str]:
        return [*self._enter(), sys.executable, str(JOB), *args]

    def run_job(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.job_command(*args), env=self.env(), capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def upload(self, files: list[Path]) -> None:
        done = self.run_job("upload", self.url, *map(str, files))
        assert done.returncode == 0, done.stderr[-2000:]

    def stop(self) -> None:
        self.kill()
        if self.proxy is not None:
            self.proxy.kill()
            self.proxy.wait(10)
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait(10)
        shutil.rmtree(self.storage, ignore_errors=True)
