"""Install the pinned OHIF Viewer for ``serve`` (run by ``make setup``; never at run time).

    python -m chexretrieve.viewer_web.install [--into DIR] [--tarball FILE]

``npm pack @ohif/app@<version>`` downloads the release tarball from the npm registry (about
50 MB; the prebuilt viewer is its ``package/dist/``), its SHA-1 is checked against the one
pinned here, and ``dist/`` is unpacked into ``DIR/dist`` (default ``<venv>/ohif/<version>``).
An existing complete install is kept (nothing is downloaded). ``--tarball`` installs from a
tarball already on disk (same check).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from chexretrieve.viewer_web.ohif import OHIF_VERSION, default_ohif_dir, find_ohif

#: SHA-1 of ohif-app-3.13.2.tgz as the npm registry publishes it (``npm view @ohif/app@3.13.2
#: dist.shasum``)
TARBALL_SHA1 = "26a51ffcc1704c30fff403258a1d7392e9a991f3"


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()  # noqa: S324 - the registry's published checksum is SHA-1
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _npm_pack(folder: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed: `apt-get install npm` (or nodejs), then retry")
    done = subprocess.run(
        [npm, "pack", f"@ohif/app@{OHIF_VERSION}", "--silent"],
        cwd=folder, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"npm pack @ohif/app@{OHIF_VERSION} failed: {done.stderr.strip()}")
    return folder / f"ohif-app-{OHIF_VERSION}.tgz"


def install(into: Path | None = None, tarball: Path | None = None) -> Path:
    """Install (or keep) OHIF's dist/ under ``into``; the dist folder."""
    into = Path(into) if into is not None else default_ohif_dir().parent
    try:
        return find_ohif(into / "dist")
    except FileNotFoundError:
        pass
    into.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into.parent, prefix=".ohif-") as work:
        work = Path(work)
        source = Path(tarball) if tarball is not None else _npm_pack(work)
        found = _sha1(source)
        if found != TARBALL_SHA1:
            raise RuntimeError(
                f"{source} has SHA-1 {found}, not the pinned {TARBALL_SHA1} of "
                f"@ohif/app@{OHIF_VERSION}: not installed"
            )
        unpacked = work / "unpacked"
        with tarfile.open(source, "r:gz") as archive:
            members = [m for m in archive.getmembers() if m.name.startswith("package/dist/")]
            archive.extractall(unpacked, members=members, filter="data")
        staged = into.with_name(into.name + ".new")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        (unpacked / "package" / "dist").rename(staged / "dist")
        shutil.rmtree(into, ignore_errors=True)
        staged.rename(into)
    return find_ohif(into / "dist")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, default=None, help="install folder (dist/ inside)")
    parser.add_argument("--tarball", type=Path, default=None, help="an ohif-app .tgz on disk")
    args = parser.parse_args(argv)
    try:
        dist = install(args.into, args.tarball)
    except (RuntimeError, OSError, tarfile.TarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"OHIF Viewer {OHIF_VERSION} installed in {dist}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
