"""chexretrieve.seal: keyed seals of derived files, checked against a hand-computed HMAC."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from chexretrieve.seal import SealError, check_seal, file_digest, read_seal, seal, write_seal

KEY = bytes(range(32))


def test_the_mac_is_hmac_sha256_of_the_canonical_record():
    record = seal("density", {"a.npz": "00" * 32}, {"revision": 3, "encoder": "phantom"}, key=KEY)
    body = json.dumps(
        {
            "kind": "density",
            "files": {"a.npz": "00" * 32},
            "inputs": {"encoder": "phantom", "revision": 3},
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    expected = hmac.new(KEY, b"chexretrieve-seal|1|" + body, hashlib.sha256).hexdigest()
    assert record["mac"] == expected
    assert check_seal(
        record, "density", {"a.npz": "00" * 32}, {"encoder": "phantom", "revision": 3}, key=KEY
    )


def test_file_digest_is_sha256_of_the_bytes(tmp_path):
    path = tmp_path / "x.bin"
    data = bytes(range(256)) * 1000
    path.write_bytes(data)
    assert file_digest(path, chunk=1000) == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["inputs"].__setitem__("revision", 4), "does not match this install"),
        (lambda r: r.__setitem__("mac", "0" * 64), "does not match this install"),
        (lambda r: r["files"].__setitem__("a.npz", "11" * 32), "does not match this install"),
        (lambda r: r.__setitem__("format", 2), "format"),
        (lambda r: r.pop("inputs"), "lacks"),
    ],
)
def test_an_edited_record_is_rejected(change, message):
    record = seal("density", {"a.npz": "00" * 32}, {"revision": 3}, key=KEY)
    change(record)
    with pytest.raises(SealError, match=message):
        check_seal(record, "density", key=KEY)


def test_another_key_kind_content_or_inputs_are_rejected():
    record = seal("features", {"f.npy": "00" * 32}, {"revision": 3}, key=KEY)
    with pytest.raises(SealError, match="another install"):
        check_seal(record, "features", key=bytes(32))
    with pytest.raises(SealError, match="not a 'density'"):
        check_seal(record, "density", key=KEY)
    with pytest.raises(SealError, match="f.npy changed"):
        check_seal(record, "features", {"f.npy": "22" * 32}, key=KEY)
    with pytest.raises(SealError, match="consists of"):
        check_seal(record, "features", {"g.npy": "00" * 32}, key=KEY)
    with pytest.raises(SealError, match="revision differ"):
        check_seal(record, "features", None, {"revision": 4}, key=KEY)


def test_the_default_key_comes_from_the_audit_key_and_round_trips(tmp_path):
    # tests/conftest.py points $CHEXRETRIEVE_AUDIT_KEY at a throw-away key
    record = seal("calibration", {}, {"finding": "Edema"})
    write_seal(tmp_path / "c.seal.json", record)
    assert check_seal(read_seal(tmp_path / "c.seal.json"), "calibration", {}, {"finding": "Edema"})
    with pytest.raises(SealError, match="missing"):
        read_seal(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_bytes(b"\x00\x01")
    with pytest.raises(SealError, match="not JSON"):
        read_seal(tmp_path / "bad.json")
