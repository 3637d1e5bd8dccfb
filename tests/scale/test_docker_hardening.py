"""docker/ as a deployment (issue 27): every image takes its base as a build argument, none pulls a
BuildKit frontend, every image ends as an unprivileged user with a healthcheck, no secret is
baked into one, every compose service has a healthcheck, and the test override swaps PostgreSQL
for the image built from Debian's packages. (`make containers-test` builds and runs them.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from test_scale_docker import DOCKER, exec_form, parse_dockerfile

DOCKERFILES = sorted(path.name for path in DOCKER.glob("*.Dockerfile"))
BASE_ARGUMENT = {
    "cpu.Dockerfile": "BASE_IMAGE",
    "cuda.Dockerfile": "CUDA_IMAGE",
    "orthanc.Dockerfile": "BASE_IMAGE",
    "postgres.Dockerfile": "BASE_IMAGE",
    "debian-python.Dockerfile": "BASE_IMAGE",
}


def test_every_dockerfile_is_known():
    assert DOCKERFILES == sorted(BASE_ARGUMENT)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_no_buildkit_frontend_and_the_base_is_a_build_argument(name):
    text = (DOCKER / name).read_text()
    assert not re.search(r"^#\s*syntax\s*=", text, re.M), f"{name} would fetch a frontend image"
    steps = parse_dockerfile(DOCKER / name)
    froms = [arguments for instruction, arguments in steps if instruction == "FROM"]
    argument = BASE_ARGUMENT[name]
    assert froms == [f"${{{argument}}}"], froms
    before_from = steps[: [s for s, _ in steps].index("FROM")]
    assert any(a.startswith(f"{argument}=") for s, a in before_from if s == "ARG")


@pytest.mark.parametrize("name", ["cpu.Dockerfile", "cuda.Dockerfile"])
def test_the_torch_index_is_a_build_argument_and_the_torch_build_is_checked(name):
    steps = parse_dockerfile(DOCKER / name)
    assert any(s == "ARG" and a.startswith("TORCH_INDEX=") for s, a in steps)
    torch_steps = [a for s, a in steps if s == "RUN" and "pip install torch" in a]
    assert len(torch_steps) == 1
    # an empty TORCH_INDEX means pip's own configuration; the wrong build of torch fails the build
    assert '${TORCH_INDEX:+--index-url "$TORCH_INDEX"}' in torch_steps[0]
    assert "torch').version.cuda" in torch_steps[0]


@pytest.mark.parametrize("name", [n for n in DOCKERFILES if n != "debian-python.Dockerfile"])
def test_images_run_unprivileged_with_a_healthcheck_and_no_secret(name):
    steps = parse_dockerfile(DOCKER / name)
    users = [a for s, a in steps if s == "USER"]
    assert users and users[-1] not in ("root", "0"), f"{name} ends as {users}"
    assert any(s == "HEALTHCHECK" and " CMD " in f" {a}" for s, a in steps), name
    for instruction, arguments in steps:
        if instruction in ("ENV", "ARG", "LABEL"):
            assert not re.search(r"PASSWORD|SECRET|TOKEN", arguments, re.I), (name, arguments)


def test_every_compose_service_has_a_healthcheck_and_loopback_ports():
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"service {name} has no healthcheck"
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        environment = service.get("environment", {})
        for key, value in environment.items():
            if "PASSWORD" in key:
                assert str(value).startswith("${"), f"{name}: {key} is written in the file"


def test_the_audit_trail_lives_on_a_volume():
    spec = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    for name in ("app", "ingest", "app-cuda"):
        service = spec["services"][name]
        audit = service["environment"]["CHEXRETRIEVE_AUDIT_LOG"]
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        assert any(audit.startswith(target + "/") for target in mounts), (name, audit, mounts)


def test_the_test_override_builds_postgres_from_debian_packages():
    override = yaml.safe_load((DOCKER / "compose.test.yaml").read_text())
    postgres = override["services"]["postgres"]
    assert postgres["image"].startswith("localhost/")
    dockerfile = DOCKER / postgres["build"]["context"] / postgres["build"]["dockerfile"]
    assert dockerfile.resolve() == (DOCKER / "postgres.Dockerfile").resolve()
    steps = parse_dockerfile(dockerfile)
    installs = " ".join(a for s, a in steps if s == "RUN")
    assert "postgresql-15" in installs
    entrypoint = exec_form(dict(steps)["ENTRYPOINT"])
    script = DOCKER / Path(entrypoint[0]).name
    assert script.is_file() and ["postgres-entrypoint.sh", entrypoint[0]] in [
        exec_form(a) for s, a in steps if s == "COPY"
    ]
    text = script.read_text()
    for variable in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB", "PGDATA"):
        assert variable in text
    assert "--encoding=UTF8" in text and "--locale=C.UTF-8" in text
