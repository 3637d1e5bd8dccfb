"""Installing the pinned OHIF tarball: checked against its pinned SHA-1, only ``dist/`` unpacked,
an existing install kept, a wrong tarball refused with nothing installed."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

import chexretrieve.viewer_web.install as install_module
from chexretrieve.viewer_web.ohif import find_ohif


def _tarball(path, extra: dict[str, bytes] | None = None):
    files = {
        "package/dist/index.html": b'<script defer src="/app.bundle.0123abcd.js"></script>',
        "package/dist/app.bundle.0123abcd.js": b"console.log('ohif')",
        "package/README.md": b"readme",
        **(extra or {}),
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return hashlib.sha1(path.read_bytes()).hexdigest()  # noqa: S324 - what npm publishes


def test_a_tarball_with_the_pinned_checksum_installs_dist_only(tmp_path, monkeypatch):
    tarball = tmp_path / "ohif-app.tgz"
    monkeypatch.setattr(install_module, "TARBALL_SHA1", _tarball(tarball))
    dist = install_module.install(tmp_path / "ohif", tarball)
    assert dist == tmp_path / "ohif" / "dist" and find_ohif(dist) == dist
    assert sorted(p.name for p in dist.iterdir()) == ["app.bundle.0123abcd.js", "index.html"]
    assert not (tmp_path / "ohif" / "README.md").exists()

    def no_download(folder):
        raise AssertionError("an existing install must not be downloaded again")

    monkeypatch.setattr(install_module, "_npm_pack", no_download)
    assert install_module.install(tmp_path / "ohif") == dist


def test_a_tarball_with_another_checksum_is_refused(tmp_path, monkeypatch):
    tarball = tmp_path / "ohif-app.tgz"
    _tarball(tarball)
    monkeypatch.setattr(install_module, "TARBALL_SHA1", "0" * 40)
    with pytest.raises(RuntimeError, match="not the pinned"):
        install_module.install(tmp_path / "ohif", tarball)
    assert not (tmp_path / "ohif").exists()
    assert install_module.main(["--into", str(tmp_path / "ohif"), "--tarball", str(tarball)]) == 1


def test_a_missing_install_says_how_to_install():
    with pytest.raises(FileNotFoundError, match="make setup"):
        find_ohif(__import__("pathlib").Path("/nonexistent/ohif/dist"))


def test_the_makefile_installs_the_version_the_app_serves():
    import re
    from pathlib import Path

    from chexretrieve.viewer_web.ohif import OHIF_VERSION

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^OHIF_VERSION := (\S+)$", makefile, re.M).group(1) == OHIF_VERSION
