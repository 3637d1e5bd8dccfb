"""docker/: the Dockerfiles and the compose file refer only to things that exist.

No Docker engine runs here, so the files are parsed: every Dockerfile instruction is a real one,
every path a COPY takes exists in its build context (and is not excluded by the context's ignore
file), every `chexretrieve` subcommand and option that an image or a compose service runs is
defined by the typer app, every `make` target and pip extra exists, every compose service of the
stack has a healthcheck whose program its image provides, and every secret the compose file
demands is in example.env.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import typer.main
import yaml

from chexretrieve.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip
DICOMWEB_PLUGIN = "/usr/share/orthanc/plugins/libOrthancDicomWeb.so"


def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; continuation lines joined, comments dropped."""
    steps: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        instruction, _, arguments = line.partition(" ")
        steps.append((instruction.upper(), arguments.strip()))
    assert not pending, f"{path.name}: the last instruction ends with a line continuation"
    return steps


def exec_form(arguments: str) -> list[str]:
    return json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def dockerfiles_with_context() -> dict[Path, Path]:
    """Every Dockerfile the compose file builds, with its build context folder."""
    found = {}
    for service in compose()["services"].values():
        build = service.get("build")
        if build:
            context = (DOCKER / build["context"]).resolve()
            found[(context / build["dockerfile"]).resolve()] = context
    return found


def cli_commands() -> dict:
    return typer.main.get_command(app).commands


def check_chexretrieve_call(words: list[str], where: str) -> None:
    """``words`` = arguments after `chexretrieve`: the subcommand and its options must exist."""
    commands = cli_commands()
    if not words or words[0].startswith("-"):
        assert all(w in ("--help", "--version") for w in words), f"{where}: {words}"
        return
    command = commands.get(words[0])
    assert command is not None, f"{where}: `chexretrieve {words[0]}` is not a command"
    while hasattr(command, "commands") and len(words) > 1 and not words[1].startswith("-"):
        words = words[1:]
        command = command.commands.get(words[0])
        assert command is not None, f"{where}: no subcommand {words[0]!r}"
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    options |= {opt for param in command.params for opt in getattr(param, "secondary_opts", [])}
    options.add("--help")
    for word in words[1:]:
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            assert name in options, f"{where}: `chexretrieve {words[0]}` has no option {name}"


def shell_invocations(command: str, program: str) -> list[list[str]]:
    """Argument lists following each call of ``program`` in a shell command line."""
    calls = []
    for part in re.split(r"&&|\|\||;|\|", command):
        words = shlex.split(part)
        if words and Path(words[0]).name == program:
            calls.append(words[1:])
    return calls


def test_compose_builds_the_three_dockerfiles_from_existing_contexts():
    built = dockerfiles_with_context()
    names = sorted(path.name for path in built)
    assert names == ["cpu.Dockerfile", "cuda.Dockerfile", "orthanc.Dockerfile"]
    for dockerfile, context in built.items():
        assert dockerfile.is_file() and context.is_dir(), dockerfile
        assert dockerfile.is_relative_to(context), f"{dockerfile} lies outside its context"


@pytest.mark.parametrize("name", ["cpu.Dockerfile", "cuda.Dockerfile", "orthanc.Dockerfile"])
def test_dockerfile_instructions_paths_and_commands_exist(name):
    dockerfile = DOCKER / name
    context = dockerfiles_with_context()[dockerfile.resolve()]
    steps = parse_dockerfile(dockerfile)
    assert {s for s, _ in steps} <= INSTRUCTIONS, f"unknown instruction in {name}"
    assert [s for s, _ in steps if s != "ARG"][0] == "FROM"
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    ignored = ignore.read_text().splitlines() if ignore.exists() else []
    extras = _pyproject_extras()
    entrypoint = None
    for instruction, arguments in steps:
        if instruction in ("COPY", "ADD") and "--from=" not in arguments:
            *sources, _ = exec_form(arguments)
            for source in sources:
                assert (context / source).exists(), f"{name}: COPY {source}: not in {context}"
                if "**" in ignored:  # everything is excluded but what is re-included
                    allowed = {f"!{source}", f"!{source}/**"}
                    assert allowed & set(ignored), f"{name}: {source} is excluded by {ignore.name}"
        if instruction == "RUN":
            for words in shell_invocations(arguments, "chexretrieve"):
                check_chexretrieve_call(words, f"{name} RUN")
            for words in shell_invocations(arguments, "make"):
                makefile = (REPO / "Makefile").read_text()
                for target in words:
                    assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target
            for extra in re.findall(r"\.\[([\w,-]+)\]", arguments):
                assert set(extra.split(",")) <= extras, f"{name}: unknown extra {extra}"
        if instruction == "ENTRYPOINT":
            entrypoint = exec_form(arguments)
        if instruction == "CMD" and entrypoint == ["chexretrieve"]:
            check_chexretrieve_call(exec_form(arguments), f"{name} CMD")
    if name != "orthanc.Dockerfile":
        assert entrypoint == ["chexretrieve"]


def test_the_ignore_files_keep_the_context_small():
    for name in ("cpu.Dockerfile.dockerignore", "cuda.Dockerfile.dockerignore"):
        lines = (DOCKER / name).read_text().splitlines()
        assert lines.count("**") == 1  # .venv, data/, .git and caches never reach the builder
        assert not any(line.startswith("!.venv") or line.startswith("!data") for line in lines)


def test_compose_services_have_healthchecks_their_images_can_run():
    services = compose()["services"]
    assert {"app", "postgres", "orthanc"} <= set(services)
    programs_from_apt = {
        "orthanc": _apt_packages(DOCKER / "orthanc.Dockerfile"),
    }
    for name in ("app", "postgres", "orthanc", "app-cuda"):
        test = services[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL"), name
        program = shlex.split(test[1])[0] if test[0] == "CMD-SHELL" else test[1]
        if name == "postgres":
            assert services[name]["image"].startswith("postgres:") and program == "pg_isready"
        elif name == "orthanc":
            assert program in programs_from_apt["orthanc"]
        else:
            assert program == "python"  # both app images run Python
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"


def test_compose_commands_are_chexretrieve_commands():
    services = compose()["services"]
    for name, service in services.items():
        if not str(service.get("image", "")).startswith("chexretrieve:"):
            continue
        words = [re.sub(r"\$\{[^}]*\}", "value", word) for word in service["command"]]
        if service.get("entrypoint") == ["/bin/sh", "-c"]:  # a script: check every call in it
            calls = re.findall(r"(?:^|[;&|]|\buntil|\bexec)\s*chexretrieve\s+([^;&|]+)", words[0])
            assert calls, f"compose service {name}: its script calls no chexretrieve command"
            for call in calls:
                check_chexretrieve_call(shlex.split(call), f"compose service {name}")
            continue
        check_chexretrieve_call(words, f"compose service {name}")
    assert services["ingest"]["command"][:2] == ["ingest", "--dicomweb"]
    assert "postgres:5432" in services["app"]["environment"]["CHEXRETRIEVE_DB"]
    assert "//orthanc:8042/" in services["ingest"]["command"][2]


def test_every_required_setting_is_in_example_env_and_volumes_are_declared():
    text = (DOCKER / "compose.yaml").read_text()
    required = set(re.findall(r"\$\{(\w+):\?", text))
    example = {
        line.split("=", 1)[0]
        for line in (DOCKER / "example.env").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert required and required <= example, required - example
    assert ".env" in (DOCKER / ".gitignore").read_text().split()
    spec = compose()
    for service in spec["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (DOCKER / source).exists(), source
            else:
                assert source in spec["volumes"], f"volume {source} is not declared"


def test_orthanc_configuration_loads_the_dicomweb_plugin():
    config = json.loads((DOCKER / "orthanc.json").read_text())
    assert config["Plugins"] == [DICOMWEB_PLUGIN]
    assert config["DicomWeb"]["Enable"] is True and config["DicomWeb"]["Root"] == "/dicom-web/"
    assert config["AuthenticationEnabled"] is True
    steps = parse_dockerfile(DOCKER / "orthanc.Dockerfile")
    copied = [exec_form(a) for s, a in steps if s == "COPY"]
    assert ["orthanc.json", "/etc/orthanc/chexretrieve.json"] in copied
    assert exec_form(dict(steps)["CMD"]) == ["/etc/orthanc/chexretrieve.json"]


def _apt_packages(dockerfile: Path) -> set[str]:
    packages = set()
    for instruction, arguments in parse_dockerfile(dockerfile):
        if instruction == "RUN":
            for words in shell_invocations(arguments, "apt-get"):
                if words and words[0] == "install":
                    packages |= {w for w in words[1:] if not w.startswith("-")}
    return packages


def _pyproject_extras() -> set[str]:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return set(project.get("optional-dependencies", {}))
