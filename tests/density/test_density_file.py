"""Issue 36: a saved archive density is verified before use (keyed seal, provenance, values).

Each damage is made the way a faulty disk or someone who may write the cache folder (without the
install's key) would; "resealed" cases are sealed with the install's own key, as a bug in the
writer would leave them, so the value checks are tested apart from the seal. The zip members are
read and rewritten with the standard library's ``zipfile``, not with the code under test.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from density_zip import npz_bytes, npz_members
from test_archive_density import CENTRES, FakeStore, _gallery, _provider

from chexretrieve.density import DensityUnavailable, QueryDensity
from chexretrieve.density.archive import ArchiveDensity, saved_revisions
from chexretrieve.density.config import FIT_NOW
from chexretrieve.density.density_file import DensityFileError, array_digest
from chexretrieve.phantom.config import RENDER_VERSION
from chexretrieve.seal import canonical_json, seal


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(folder, the path of a clean saved fit, its bytes, the clean fit)."""
    root = tmp_path_factory.mktemp("density-file")
    _provider(root).assess(CENTRES[0], _gallery())
    [(_, path)] = saved_revisions(root / "density", FakeStore.label, "fake:1")
    return root, path, path.read_bytes(), ArchiveDensity.load(path)


def _reseal(members: dict, key: bytes | None = None) -> dict:
    """The members with a seal computed over them (``key``: an attacker's; None: the install's)."""
    members = {n: v for n, v in members.items() if n != "seal"}
    provenance = json.loads(bytes(members["meta"]).decode())["provenance"]
    digests = {name: array_digest(value) for name, value in members.items()}
    record = seal("archive-density", digests, provenance, key=key)
    members["seal"] = np.frombuffer(canonical_json(record), dtype=np.uint8)
    return members


def _with_reference(members: dict, reference: np.ndarray) -> dict:
    out = dict(members)
    out["reference"] = np.asarray(reference, dtype=np.float64)
    return out


def _damaged(name: str, clean: bytes) -> bytes:
    members = npz_members(clean)
    reference = members["reference"]
    if name == "empty file":
        return b""
    if name == "truncated to half":
        return clean[: len(clean) // 2]
    if name == "bad zip CRC":
        data = bytearray(clean)
        start = clean.index(b"reference.npy") + 200  # inside that member's stored bytes
        data[start] ^= 0xFF
        return bytes(data)
    if name == "NaN reference values":
        return npz_bytes(_with_reference(members, np.full_like(reference, np.nan)))
    if name == "NaN reference values, resealed":
        return npz_bytes(_reseal(_with_reference(members, np.full_like(reference, np.nan))))
    if name == "empty reference values, resealed":
        return npz_bytes(_reseal(_with_reference(members, np.zeros(0))))
    if name == "wrong-length reference values, resealed":
        longer = np.sort(np.concatenate([reference] * 3 + [members["log_density"]]))
        return npz_bytes(_reseal(_with_reference(members, longer)))
    if name == "unsorted reference values, resealed":
        return npz_bytes(_reseal(_with_reference(members, reference[::-1])))
    if name == "threshold raised, resealed":
        meta = json.loads(bytes(members["meta"]).decode())
        meta["threshold"] = float(np.percentile(reference, 60))
        members["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        return npz_bytes(_reseal(members))
    if name == "forged: threshold raised, sealed with another key":
        meta = json.loads(bytes(members["meta"]).decode())
        meta["threshold"] = float(np.percentile(reference, 60))
        meta["ood_percentile"] = 60.0
        members["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        return npz_bytes(_reseal(members, key=os.urandom(32)))
    if name == "seal removed":
        return npz_bytes({n: v for n, v in members.items() if n != "seal"})
    if name == "NaN mixture direction, resealed":
        directions = members["directions"].copy()
        directions[0, 0] = np.nan
        return npz_bytes(_reseal({**members, "directions": directions}))
    raise AssertionError(name)


#: damage -> words the reason must contain
DAMAGE = {
    "empty file": "empty (0 bytes)",
    "truncated to half": "not a complete .npz",
    "bad zip CRC": "CRC",
    "NaN reference values": "changed after it was sealed",
    "NaN reference values, resealed": "non-finite reference values",
    "empty reference values, resealed": "reference values of shape (0,)",
    "wrong-length reference values, resealed": "reference values for",
    "unsorted reference values, resealed": "out of order",
    "threshold raised, resealed": "not the 0.5th percentile",
    "forged: threshold raised, sealed with another key": "does not match this install's key",
    "seal removed": "carries no seal",
    "NaN mixture direction, resealed": "non-finite mixture directions",
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_or_forged_file_is_refused_with_its_reason(fitted, tmp_path, name):
    _, _, clean, _ = fitted
    path = tmp_path / "revision-000000000007.npz"
    path.write_bytes(_damaged(name, clean))
    with pytest.raises(DensityFileError) as refused:
        ArchiveDensity.load(path)
    assert DAMAGE[name] in refused.value.reason, refused.value.reason
    assert str(path) in str(refused.value)


def test_the_file_carries_its_provenance_under_the_seal(fitted, tmp_path):
    _, path, clean, density = fitted
    meta = json.loads(bytes(npz_members(clean)["meta"]).decode())
    provenance = meta["provenance"]
    assert provenance["store"] == FakeStore.label and provenance["encoder"] == "fake:1"
    assert provenance["revision"] == 7 and provenance["render_version"] == RENDER_VERSION
    assert provenance["fingerprint"] == density.fingerprint and provenance["format"] == 2
    expect = {"store": FakeStore.label, "encoder": "fake:1", "revision": 7}
    assert ArchiveDensity.load(path, expect=expect).threshold == density.threshold
    with pytest.raises(DensityFileError, match="fitted for revision 7, not 8"):
        ArchiveDensity.load(path, expect={**expect, "revision": 8})  # renamed to another revision
    with pytest.raises(DensityFileError, match="fitted for store"):
        ArchiveDensity.load(path, expect={**expect, "store": "sqlite:///other.sqlite"})


def test_save_refuses_values_no_fit_holds(fitted, tmp_path):
    from dataclasses import replace

    _, _, _, density = fitted
    bad = replace(density, reference=np.full_like(density.reference, np.nan))
    with pytest.raises(ValueError, match="non-finite reference values"):
        bad.save(tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize(
    "name", ["bad zip CRC", "forged: threshold raised, sealed with another key"]
)
def test_a_server_answers_without_typicality_until_the_refit_a_command_refits_now(
    fitted, tmp_path, name
):
    root, path, clean, density = fitted
    folder = tmp_path / "density" / path.parent.name
    folder.mkdir(parents=True)
    target = folder / path.name
    target.write_bytes(_damaged(name, clean))
    gallery = _gallery()
    typical = gallery.embeddings[3]
    server = _provider(tmp_path)
    first = server.assess(typical, gallery)
    assert isinstance(first, DensityUnavailable) and not first.ood
    assert first.note.startswith("typicality unavailable: rebuilding"), first.note
    assert not target.exists() and len(list((folder / "set-aside").iterdir())) == 1
    server.wait_for_background_fit(timeout=120)
    after = server.assess(typical, gallery)
    assert isinstance(after, QueryDensity) and not after.ood
    # the refit equals the clean fit (scored by its OOD model: the Gaussian by default, issue 32)
    assert after.log_density == pytest.approx(float(density.ood_score(typical[None])[0]))
    target.write_bytes(_damaged(name, clean))
    command = _provider(tmp_path, background_fit_above=FIT_NOW).assess(typical, gallery)
    assert isinstance(command, QueryDensity) and not command.ood and "refitted now" in command.note


def test_show_says_damaged_and_leaves_the_file_where_it_is(fitted, tmp_path):
    _, path, clean, _ = fitted
    folder = tmp_path / "density" / path.parent.name
    folder.mkdir(parents=True)
    (folder / path.name).write_bytes(b"")
    out = _provider(tmp_path, fit_on_search=False).assess(CENTRES[0], _gallery())
    assert isinstance(out, DensityUnavailable) and "damaged (it is empty (0 bytes))" in out.note
    assert (folder / path.name).exists() and not (folder / "set-aside").exists()


def test_a_damaged_file_that_cannot_be_moved_is_not_read_again(fitted, tmp_path, monkeypatch):
    _, path, _, _ = fitted
    folder = tmp_path / "density" / path.parent.name
    folder.mkdir(parents=True)
    (folder / path.name).write_bytes(b"\0" * 100)
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(PermissionError(13, "no")))
    loads = []
    original = ArchiveDensity.load.__func__
    monkeypatch.setattr(
        ArchiveDensity,
        "load",
        classmethod(lambda cls, p, **k: loads.append(p) or original(cls, p, **k)),
    )
    provider = _provider(tmp_path)
    gallery = _gallery()
    provider.assess(CENTRES[0], gallery)
    provider.wait_for_background_fit(timeout=120)
    provider._current = None  # as if the fit were not held: the saved files are read again
    out = provider.assess(CENTRES[0], gallery)
    assert isinstance(out, QueryDensity) and len(loads) == 1


@pytest.mark.parametrize("order", ["ascending", "shuffled"])
def test_save_refuses_repeated_image_ids_in_any_order(fitted, tmp_path, order):
    """Against np.unique: a fit's ids (ascending), the same shuffled, and each with one id twice."""
    from dataclasses import replace

    from chexretrieve.density.density_file import check_density

    _, _, _, density = fitted
    ids = np.asarray(density.image_ids)
    if order == "shuffled":
        ids = np.random.default_rng(0).permutation(ids)
    repeated = ids.copy()
    repeated[-1] = repeated[0]
    assert np.unique(ids).size == ids.size and np.unique(repeated).size < repeated.size
    check_density(replace(density, image_ids=ids))  # distinct: accepted
    with pytest.raises(ValueError, match="repeated image ids"):
        replace(density, image_ids=repeated).save(tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()
