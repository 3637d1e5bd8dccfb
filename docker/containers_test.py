#!/usr/bin/env python3
"""`make containers-test`: build every image of docker/ and run the stack as a user would.

1. Engine: podman (preferred) or docker. For podman a containers.conf is written (runc when it is
   installed, cgroupfs, low ulimits: podman's default crun fails in restricted hosts).
2. Base images: pulled from the registry when one answers; otherwise Debian bookworm is made
   with debootstrap from the host's apt mirror and imported, and Python 3.11 is installed on it
   from Debian's packages (docker/debian-python.Dockerfile); PostgreSQL then comes from Debian's
   postgresql-15 (docker/postgres.Dockerfile, swapped in by docker/compose.test.yaml).
3. Builds the CPU app image, Orthanc's and (offline) PostgreSQL's; podman builds get the host's
   pip configuration read-only (its merged `pip config list`, the files and folders it names,
   the CA bundle), so they install from the same index as the host; nothing of it stays in the
   images. ``--cuda`` builds the CUDA image too.
4. Starts the compose stack (podman-compose, installed into the work folder when missing, or
   `docker compose`) with fresh random secrets and free loopback ports, and waits until
   PostgreSQL, Orthanc and the app are healthy (podman without systemd runs no healthcheck timers:
   this script runs them).
5. As a user would: opens the UI in headless Chromium (it must say to run ingest on the empty
   store), pushes phantom studies to Orthanc over DICOMweb (STOW-RS), runs the ingest service,
   searches through the app's CLI inside the app container, reloads the UI page (the case lookup
   must now be served) and screenshots it; then tears everything down (containers, network,
   volumes).
6. Prints the time of every step; screenshots and times.json go to test-artifacts/containers/.

Run with the project's Python (it needs pydicom, dicomweb-client and playwright):
    .venv/bin/python docker/containers_test.py [--work DIR] [--keep] [--cuda] [--offline]
Exit 0 when every check passed; 1 with the failing step and the tail of its log otherwise.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
ARTIFACTS = REPO / "test-artifacts" / "containers"
PROJECT = "chexretrieve-ct"
DEBIAN = "localhost/debian:bookworm-slim"
REGISTRY_DEBIAN = "docker.io/library/debian:bookworm-slim"
PYTHON_BASE = "localhost/chexretrieve-python:3.11-bookworm"
IMAGES = {
    "cpu": "localhost/chexretrieve:cpu",
    "orthanc": "localhost/chexretrieve-orthanc:latest",
    "postgres": "localhost/chexretrieve-postgres:15",
    "cuda": "localhost/chexretrieve:cuda",
}
PODMAN_COMPOSE = "podman-compose==1.6.0"
CHROMIUM = "/usr/bin/chromium"
FINDING = "Pleural Effusion"
N_STUDIES = 8
UI_USER = "chex"


class StepFailed(RuntimeError):
    pass


class Run:
    """Runs commands, logs them to WORK/logs, times the named steps."""

    def __init__(self, work: Path, env: dict[str, str]):
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.times: list[tuple[str, float]] = []

    def __call__(self, args, log: str, *, timeout: float = 1800, check: bool = True, **kw):
        path = self.logs / f"{log}.log"
        with path.open("a") as out:
            out.write(f"\n$ {' '.join(map(str, args))}\n")
            out.flush()
            try:
                done = subprocess.run(
                    [str(a) for a in args], stdout=out, stderr=subprocess.STDOUT,
                    env=self.env, timeout=timeout, **kw,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise StepFailed(f"{args[0]} ran past {timeout:.0f} s; log: {path}") from None
        if check and done.returncode != 0:
            raise StepFailed(f"`{' '.join(map(str, args))}` exited {done.returncode}\n{tail(path)}")
        return done.returncode

    def output(self, args, *, timeout: float = 120, check: bool = True) -> str:
        done = subprocess.run(
            [str(a) for a in args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and done.returncode != 0:
            raise StepFailed(f"`{' '.join(map(str, args))}` exited {done.returncode}: "
                             f"{done.stderr.strip()[-2000:]}")  # fmt: skip
        return done.stdout

    @contextlib.contextmanager
    def step(self, name: str):
        print(f"== {name}", flush=True)
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            self.times.append((name, seconds))
            print(f"   {name}: {seconds:.1f} s", flush=True)


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------- the engine
def engine_env(engine: str, work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CHEXRETRIEVE_DB", None)
    if engine == "podman" and "CONTAINERS_CONF" not in env:
        conf = work / "containers.conf"
        runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""
        conf.write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
            f'[engine]\n{runtime}cgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
        )
        env["CONTAINERS_CONF"] = str(conf)
    return env


def image_exists(run: Run, engine: str, image: str) -> bool:
    args = [engine, "image", "exists", image] if engine == "podman" else [
        engine, "image", "inspect", image]  # fmt: skip
    return subprocess.run(args, env=run.env, capture_output=True).returncode == 0


def pull(run: Run, engine: str, image: str) -> bool:
    """True when ``image`` came from a registry (a short timeout: offline hosts fail fast)."""
    try:
        code = run([engine, "pull", image], "pull", timeout=300, check=False)
    except StepFailed:
        return False
    return code == 0


def debian_mirror() -> str:
    """The first Debian archive URI of the host's apt sources (deb822 or one-line)."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    sources = Path("/etc/apt/sources.list")
    if sources.exists():
        for line in sources.read_text().splitlines():
            words = line.split()
            if words[:1] == ["deb"] and "security" not in line:
                return next(w for w in words[1:] if "://" in w)
    return "http://deb.debian.org/debian"


def debootstrap_base(run: Run, engine: str) -> None:
    """Debian bookworm (minbase) from the host's mirror, with the host's apt sources and its
    Acquire settings, imported as DEBIAN."""
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        raise StepFailed(
            "no image registry answers and debootstrap cannot run here: run as root with "
            "`apt-get install -y debootstrap` (or make a registry reachable)"
        )
    rootfs = run.work / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    run(["debootstrap", "--variant=minbase", "bookworm", rootfs, debian_mirror()], "debootstrap")
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    for path in Path("/etc/apt/sources.list.d").glob("*"):
        if path.suffix in (".sources", ".list") and "debian" in path.read_text():
            shutil.copy(path, rootfs / "etc/apt/sources.list.d" / path.name)
    for path in Path("/etc/apt/apt.conf.d").glob("*"):
        if path.is_file() and "Acquire::" in path.read_text(errors="replace"):
            shutil.copy(path, rootfs / "etc/apt/apt.conf.d" / path.name)
    for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    with (run.logs / "import.log").open("a") as out:
        code = subprocess.run(
            [engine, "import", "-", DEBIAN], stdin=tar.stdout, stdout=out,
            stderr=subprocess.STDOUT, env=run.env,
        ).returncode  # fmt: skip
    tar.wait()
    if code != 0 or tar.returncode != 0:
        raise StepFailed(f"importing the debootstrap root failed\n{tail(run.logs / 'import.log')}")
    shutil.rmtree(rootfs, ignore_errors=True)


# ------------------------------------------------------------------- pip settings for builds
def pip_volumes(work: Path, without: tuple[str, ...] = (), listed: str | None = None) -> list[str]:
    """`-v` arguments that hand the host's pip configuration to a podman build, read-only: the
    merged settings as /etc/pip.conf, every file and folder they name, and the CA bundle.
    ``without``: settings left out (the CUDA build drops find-links, where a local CPU torch
    wheel would win over the index's CUDA build). ``listed``: `pip config list`'s output
    (default: this Python's)."""
    if listed is None:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
        ).stdout
    settings: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if not value:
            continue
        settings[key.rpartition(".")[2]] = ast.literal_eval(value)
    for name in without:
        settings.pop(name, None)
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if bundle and "cert" not in settings:
        settings["cert"] = bundle
    # files (the CA bundle, a constraints file) go to a folder of their own: mounted over the
    # image's /etc they would block a package that writes there (ca-certificates' own bundle)
    volumes = []
    for key, value in list(settings.items()):
        if str(value).startswith("/") and Path(value).is_file():
            inside = f"/run/host-pip/{key}-{Path(value).name}"
            volumes.append(f"-v={value}:{inside}:ro")
            settings[key] = inside
    conf = work / ("pip.conf" if not without else f"pip-without-{'-'.join(without)}.conf")
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    paths = set()
    for value in settings.values():
        for word in str(value).split():
            path = word.removeprefix("file://").rstrip("/")
            if Path(path).name == "simple":  # an index's pages link to files beside it
                path = str(Path(path).parent)
            if path.startswith("/") and Path(path).is_dir():
                paths.add(path)
    # a folder inside another mounted folder is mounted with it
    kept = [p for p in sorted(paths) if not any(p.startswith(f + "/") for f in paths)]
    return [f"-v={conf}:/etc/pip.conf:ro", *volumes] + [f"-v={p}:{p}:ro" for p in kept]


def build(run: Run, engine: str, name: str, dockerfile: str, context: Path, args: dict,
          volumes: list[str]) -> None:  # fmt: skip
    command = [engine, "build", "--pull=never" if engine == "podman" else "--pull=false",
               "--network=host", "-f", DOCKER / dockerfile, "-t", IMAGES[name]]  # fmt: skip
    ignore = DOCKER / f"{dockerfile}.dockerignore"
    if engine == "podman":
        command += [f"--ignorefile={ignore}"] if ignore.exists() else []
        command += ["--format=docker", *volumes]  # docker format keeps HEALTHCHECK
    for key, value in args.items():
        command += ["--build-arg", f"{key}={value}"]
    run([*command, context], f"build-{name}", timeout=3600)
    size = run.output([engine, "image", "inspect", "--format", "{{.Size}}", IMAGES[name]])
    print(f"   {IMAGES[name]}: {int(size.strip()) / 1e9:.2f} GB", flush=True)


# ------------------------------------------------------------------------------ the stack
class Stack:
    def __init__(self, run: Run, engine: str, files: list[Path], env: dict[str, str],
                 compose: list[str]):  # fmt: skip
        self.run, self.engine, self.env = run, engine, env
        self.base = [*compose, "-p", PROJECT]
        for path in files:
            self.base += ["-f", path]
        run.env = {**run.env, **env}

    def __call__(self, *args, log: str = "compose", **kw):
        return self.run([*self.base, *args], log, cwd=DOCKER, **kw)

    def containers(self) -> dict[str, str]:
        """service name -> container name of this project's running containers."""
        found = {}
        label = "com.docker.compose.project"  # podman-compose sets it too
        out = self.run.output([self.engine, "ps", "-a", "--filter", f"label={label}={PROJECT}",
                               "--format", "{{.Names}}"])  # fmt: skip
        for name in out.split():
            labels = json.loads(self.run.output(
                [self.engine, "inspect", "--format", "{{json .Config.Labels}}", name]))  # fmt: skip
            service = labels.get("com.docker.compose.service")
            if service:
                found[service] = name
        return found

    def healthy(self, container: str) -> bool:
        if self.engine == "podman":  # no systemd: run the healthcheck here
            return subprocess.run([self.engine, "healthcheck", "run", container], env=self.run.env,
                                  capture_output=True).returncode == 0  # fmt: skip
        status = self.run.output(
            [self.engine, "inspect", "--format", "{{.State.Health.Status}}", container],
            check=False,
        )
        return status.strip() == "healthy"

    def wait_healthy(self, services: tuple[str, ...], timeout: float = 600) -> dict[str, float]:
        start, ready = time.monotonic(), {}
        while time.monotonic() - start < timeout:
            running = self.containers()
            for service in services:
                if service not in ready and service in running and self.healthy(running[service]):
                    ready[service] = time.monotonic() - start
                    print(f"   {service} healthy after {ready[service]:.1f} s", flush=True)
            if len(ready) == len(services):
                return ready
            time.sleep(1)
        missing = [s for s in services if s not in ready]
        logs = ""
        for service in missing:
            name = self.containers().get(service)
            if name:
                logs += f"\n--- {service} ({name}) ---\n" + self.run.output(
                    [self.engine, "logs", "--tail", "30", name], check=False)  # fmt: skip
        raise StepFailed(f"not healthy within {timeout:.0f} s: {', '.join(missing)}{logs}")


def compose_command(run: Run, engine: str) -> list[str]:
    if engine == "docker":
        return ["docker", "compose"]
    found = shutil.which("podman-compose")
    if found:
        return [found]
    tools = run.work / "tools"
    if not (tools / "bin" / "podman-compose").exists():
        run([sys.executable, "-m", "venv", tools], "tools")
        run([tools / "bin" / "pip", "install", "-q", PODMAN_COMPOSE], "tools")
    return [str(tools / "bin" / "podman-compose")]


# --------------------------------------------------------------------------- user's steps
def make_phantoms(run: Run) -> list[Path]:
    folder = run.work / "phantoms"
    run([sys.executable, "-m", "chexretrieve", "phantom", "make", folder, "--n", N_STUDIES,
         "--size", "256", "--workers", "1", "--force"], "phantoms", cwd=REPO)  # fmt: skip
    files = sorted(folder.rglob("*.dcm"))
    if len(files) != N_STUDIES:
        raise StepFailed(f"phantom make wrote {len(files)} DICOM files, not {N_STUDIES}")
    return files


def stow(url: str, user: str, password: str, files: list[Path]) -> int:
    """Store the files in Orthanc with STOW-RS; the number of studies Orthanc then lists."""
    import pydicom
    import requests
    from dicomweb_client.api import DICOMwebClient

    session = requests.Session()
    session.auth = (user, password)
    client = DICOMwebClient(url, session=session)
    client.store_instances([pydicom.dcmread(path) for path in files])
    studies = {pydicom.dcmread(p, stop_before_pixels=True).StudyInstanceUID for p in files}
    listed = {s["0020000D"]["Value"][0] for s in client.search_for_studies()}
    if not studies <= listed:
        raise StepFailed(f"Orthanc lists {len(listed)} studies; {len(studies - listed)} pushed "
                         "studies are missing")  # fmt: skip
    return len(listed)


def browse(
    url: str, password: str, shot: Path, expect: str, refuse: str | None, case: int | None = None
) -> str:
    """Log in to the UI in headless Chromium, wait for ``expect`` on the page, open archived case
    ``case`` when given (the UI then ranks its similar cases), screenshot it; the page's text."""
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url, timeout=60_000)
            page.locator("input[type=password]").wait_for(timeout=60_000)
            page.locator("input[type=text]").first.fill(UI_USER)
            page.locator("input[type=password]").fill(password)
            page.locator("input[type=password]").press("Enter")
            page.get_by_text(expect, exact=False).first.wait_for(timeout=120_000)
            if case is not None:
                page.fill("#case-id textarea, #case-id input", str(case))
                page.click("#load-case")
                page.wait_for_selector("#results .cx-card", timeout=300_000)
                ranked = page.inner_text("#results")
                if "candidate cases" not in ranked:
                    raise StepFailed(f"the UI's ranking for case {case} reads: {ranked[:300]!r}")
            text = page.inner_text("body")
            page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    if refuse and refuse in text:
        raise StepFailed(f"the page at {url} still says {refuse!r}")
    return text


AUDIT_CHECK = (
    "import json, os; from chexretrieve.audit import verify_audit_file; "
    "p = os.environ['CHEXRETRIEVE_AUDIT_LOG']; "
    "print(json.dumps({'problems': verify_audit_file(p), "
    "'actions': [json.loads(l)['action'] for l in open(p)]}))"
)


def audit_in_app(stack: Stack) -> dict:
    """The app container's audit file (on the appdata volume): intact, and what it recorded."""
    container = stack.containers()["app"]
    out = stack.run.output([stack.engine, "exec", container, "python", "-c", AUDIT_CHECK])
    audit = json.loads(out)
    if audit["problems"] or "search" not in audit["actions"]:
        raise StepFailed(f"the audit file in the app container: {audit}")
    return audit


def search_in_app(stack: Stack) -> dict:
    container = stack.containers()["app"]
    out = stack.run.output([stack.engine, "exec", container, "chexretrieve", "search",
                            "--finding", FINDING, "--case", "1", "--top-k", "5", "--json"],
                           timeout=300)  # fmt: skip
    result = json.loads(out)
    if len(result["hits"]) != 5:
        raise StepFailed(f"the app's CLI search found {len(result['hits'])} hits, not 5")
    return result


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/var/tmp/chexretrieve-containers"),
        help="folder for the base root, logs and tools (kept: caches)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--cuda", action="store_true", help="build the CUDA image too")
    parser.add_argument(
        "--offline", action="store_true", help="never try a registry: debootstrap the base images"
    )
    parser.add_argument("--torch-index", default=None,
                        help="TORCH_INDEX of the CPU image (default: the Dockerfile's with a "
                             "registry, pip's own configuration without one)")  # fmt: skip
    options = parser.parse_args(argv)
    work = options.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    engine = "podman" if shutil.which("podman") else "docker" if shutil.which("docker") else None
    if engine is None:
        print(
            "neither podman nor docker is installed: apt-get install -y podman runc netavark "
            "aardvark-dns iptables debootstrap",
            file=sys.stderr,
        )
        return 1
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install -y chromium", file=sys.stderr)
        return 1
    run = Run(work, engine_env(engine, work))
    total = time.monotonic()
    stack = None
    failed = None
    try:
        with run.step("base images"):
            registry = not options.offline and pull(run, engine, REGISTRY_DEBIAN)
            if registry:
                run([engine, "tag", REGISTRY_DEBIAN, DEBIAN], "pull")
                python_base = "docker.io/library/python:3.11-slim-bookworm"
                for image in (python_base, "docker.io/library/postgres:15-bookworm"):
                    if not pull(run, engine, image):
                        raise StepFailed(f"the registry answered but {image} could not be pulled")
            else:
                print("   no registry: Debian packages only", flush=True)
                if not image_exists(run, engine, DEBIAN):
                    debootstrap_base(run, engine)
                python_base = PYTHON_BASE
        volumes = pip_volumes(work) if engine == "podman" else []
        torch_index = options.torch_index
        if torch_index is None and not registry:
            torch_index = ""  # the host's pip configuration, handed to the build
        if not registry:
            with run.step("build python base"):
                run([engine, "build", "--pull=never", "--network=host", "-f",
                     DOCKER / "debian-python.Dockerfile", "--build-arg", f"BASE_IMAGE={DEBIAN}",
                     "-t", PYTHON_BASE, DOCKER], "build-python", timeout=3600)  # fmt: skip
        app_args = {"BASE_IMAGE": python_base}
        if torch_index is not None:
            app_args["TORCH_INDEX"] = torch_index
        with run.step("build cpu image"):
            build(run, engine, "cpu", "cpu.Dockerfile", REPO, app_args, volumes)
        with run.step("build orthanc image"):
            build(run, engine, "orthanc", "orthanc.Dockerfile", DOCKER, {"BASE_IMAGE": DEBIAN},
                  volumes)  # fmt: skip
        if not registry:
            with run.step("build postgres image"):
                build(run, engine, "postgres", "postgres.Dockerfile", DOCKER,
                      {"BASE_IMAGE": DEBIAN}, volumes)  # fmt: skip
        if options.cuda:
            with run.step("build cuda image"):
                cuda_args = {} if registry else {"CUDA_IMAGE": DEBIAN, "TORCH_INDEX": ""}
                cuda_volumes = pip_volumes(work, ("find-links",)) if engine == "podman" else []
                build(run, engine, "cuda", "cuda.Dockerfile", REPO, cuda_args, cuda_volumes)

        ui_port, orthanc_port = free_port(), free_port()
        secrets_env = {
            "POSTGRES_PASSWORD": secrets.token_urlsafe(18),
            "ORTHANC_USER": "chex",
            "ORTHANC_PASSWORD": secrets.token_urlsafe(18),
            "CHEXRETRIEVE_UI_USER": UI_USER,
            "CHEXRETRIEVE_UI_PASSWORD": secrets.token_urlsafe(18),
            "UI_PORT": str(ui_port),
            "ORTHANC_HTTP_PORT": str(orthanc_port),
        }
        files = [DOCKER / "compose.yaml"] + ([] if registry else [DOCKER / "compose.test.yaml"])
        with run.step("compose tool"):
            compose = compose_command(run, engine)
        stack = Stack(run, engine, files, secrets_env, compose)
        env_file = work / "stack.env"  # for --keep: `podman-compose --env-file` reaches the stack
        env_file.touch(mode=0o600)
        env_file.write_text("".join(f"{k}={v}\n" for k, v in secrets_env.items()))
        stack("down", "-v", check=False)  # what a previous, interrupted run left
        with run.step("start stack (up -d until healthy)"):
            stack("up", "-d", "--no-build")
            stack.wait_healthy(("postgres", "orthanc", "app"))
        ui = f"http://127.0.0.1:{ui_port}/"
        with run.step("UI on the empty store (Chromium)"):
            browse(ui, secrets_env["CHEXRETRIEVE_UI_PASSWORD"], ARTIFACTS / "ui-empty-store.png",
                   "holds no cases", None)  # fmt: skip
        with run.step(f"phantom studies ({N_STUDIES})"):
            files_dcm = make_phantoms(run)
        with run.step("STOW-RS to Orthanc"):
            listed = stow(f"http://127.0.0.1:{orthanc_port}/dicom-web", "chex",
                          secrets_env["ORTHANC_PASSWORD"], files_dcm)  # fmt: skip
            print(f"   Orthanc lists {listed} studies", flush=True)
        with run.step("ingest service (run --rm ingest)"):
            stack("--profile", "ingest", "run", "--rm", "ingest", log="ingest", timeout=1800)
        with run.step("search with the app's CLI in the app container"):
            result = search_in_app(stack)
            print(f"   {len(result['hits'])} hits for {FINDING} (case 1), top score "
                  f"{result['hits'][0]['score']:.3f}", flush=True)  # fmt: skip
            audit = audit_in_app(stack)
            print(f"   audit file intact, {len(audit['actions'])} records", flush=True)
        with run.step("UI after ingest: open case 2, its ranking (Chromium)"):
            text = browse(ui, secrets_env["CHEXRETRIEVE_UI_PASSWORD"],
                          ARTIFACTS / "ui-after-ingest.png", "Phantom world",
                          "holds no cases", case=2)  # fmt: skip
            if f"Browse the archive ({N_STUDIES} cases)" not in text:
                raise StepFailed(f"the UI does not offer the {N_STUDIES} ingested cases")
    except StepFailed as exc:
        failed = str(exc)
    finally:
        if stack is not None and not options.keep:
            with run.step("tear down (down -v)"):
                stack("down", "-v", check=False)
            (work / "stack.env").unlink(missing_ok=True)
    run.times.append(("total", time.monotonic() - total))
    (ARTIFACTS / "times.json").write_text(
        json.dumps({"engine": engine, "steps": dict(run.times), "passed": failed is None},
                   indent=2))  # fmt: skip
    print("\nstep times:")
    for name, seconds in run.times:
        print(f"  {seconds:8.1f} s  {name}")
    if failed:
        print(f"\nFAILED: {failed}\nlogs: {run.logs}", file=sys.stderr)
        return 1
    print(f"\ncontainers test passed; screenshots in {ARTIFACTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
