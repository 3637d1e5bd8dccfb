"""docker/containers_test.py's pure parts (the script itself runs as `make containers-test`):
how the host's pip configuration is handed to an image build, read-only, and which Debian mirror
debootstrap uses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "chexretrieve_containers_test", REPO / "docker" / "containers_test.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _listing(**settings: str) -> str:
    """Text as `pip config list` prints it: key='value' per line (repr-quoted)."""
    return "".join(f"{key}={value!r}\n" for key, value in settings.items())


def test_pip_settings_are_handed_over_read_only_with_files_out_of_etc(
    script, tmp_path, monkeypatch
):
    monkeypatch.delenv("PIP_CERT", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    index = tmp_path / "pypi"
    (index / "simple").mkdir(parents=True)
    (index / "files").mkdir()
    wheels = tmp_path / "wheels"
    (wheels / "inner").mkdir(parents=True)
    bundle = tmp_path / "ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    listed = _listing(**{
        "global.cert": str(bundle),
        "global.constraint": str(constraints),
        "global.extra-index-url": f"file://{index}/simple https://mirror.example/simple",
        "global.find-links": f"{wheels} {wheels}/inner",
        ":env:.default-timeout": "180",
    })  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    volumes = script.pip_volumes(work, listed=listed)

    conf = (work / "pip.conf").read_text().splitlines()
    assert conf[0] == "[global]"
    assert "cert = /run/host-pip/cert-ca.crt" in conf
    assert "constraint = /run/host-pip/constraint-constraints.txt" in conf
    assert f"extra-index-url = file://{index}/simple https://mirror.example/simple" in conf
    assert "default-timeout = 180" in conf
    assert volumes == [
        f"-v={work / 'pip.conf'}:/etc/pip.conf:ro",
        f"-v={bundle}:/run/host-pip/cert-ca.crt:ro",
        f"-v={constraints}:/run/host-pip/constraint-constraints.txt:ro",
        # the index's folder, not only simple/: its pages link to ../files
        f"-v={index}:{index}:ro",
        # the inner find-links folder comes with its parent
        f"-v={wheels}:{wheels}:ro",
    ]
    assert all(v.endswith(":ro") for v in volumes)


def test_the_cuda_build_gets_the_settings_without_find_links(script, tmp_path, monkeypatch):
    monkeypatch.delenv("PIP_CERT", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    listed = _listing(**{"global.find-links": str(wheels), "global.timeout": "60"})
    volumes = script.pip_volumes(tmp_path, ("find-links",), listed=listed)
    conf = tmp_path / "pip-without-find-links.conf"
    assert conf.read_text() == "[global]\ntimeout = 60\n"
    assert volumes == [f"-v={conf}:/etc/pip.conf:ro"]  # the wheel folder is not mounted either


def test_debian_mirror_is_read_from_the_hosts_apt_sources(script):
    mirror = script.debian_mirror()
    assert mirror.startswith(("http://", "https://")) and "security" not in mirror


def test_a_ca_bundle_named_only_by_the_environment_is_handed_over(script, tmp_path, monkeypatch):
    bundle = tmp_path / "bundle.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("PIP_CERT", str(bundle))
    volumes = script.pip_volumes(tmp_path, listed="")
    assert f"-v={bundle}:/run/host-pip/cert-bundle.pem:ro" in volumes
    assert "cert = /run/host-pip/cert-bundle.pem" in (tmp_path / "pip.conf").read_text()
