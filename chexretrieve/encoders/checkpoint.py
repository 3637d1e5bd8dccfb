"""Reading weight files: hashing, safe unpickling, unwrapping, and strict matching to a model.

Every problem becomes an EncoderError that names the file and what is wrong with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from torch import nn

from chexretrieve.encoders.base import EncoderError

#: keys under which training scripts commonly nest the weights
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")
#: hex digits of the SHA-256 kept in encoder ids
SHORT_HASH_LENGTH = 12
#: at most this many key names are quoted in an error message
QUOTED_KEYS = 5


def short_hash(data: bytes | Iterable[bytes]) -> str:
    """The first 12 hex digits of the SHA-256 of ``data`` (bytes, or chunks of bytes in order)."""
    digest = hashlib.sha256()
    for chunk in [data] if isinstance(data, bytes | bytearray) else data:
        digest.update(chunk)
    return digest.hexdigest()[:SHORT_HASH_LENGTH]


def hash_files(paths: Iterable[Path]) -> str:
    """Short hash over the names and bytes of several files (a sharded weights folder)."""

    def chunks() -> Iterable[bytes]:
        for path in sorted(paths, key=lambda p: p.name):
            yield path.name.encode("utf-8") + b"\0"
            yield from _file_chunks(path)

    return short_hash(chunks())


def read_checkpoint(path: Path | str) -> tuple[dict[str, torch.Tensor], str]:
    """(state dict, short hash of the file's bytes) for a ``torch.save`` file.

    Only tensors and plain containers are unpickled (``weights_only=True``). A dict wrapping the
    weights under ``state_dict`` / ``model_state_dict`` / ``model`` is unwrapped, and a ``module.``
    prefix on every key (DataParallel) is removed.
    """
    path = Path(path)
    if not path.exists():
        raise EncoderError(f"checkpoint {path} does not exist")
    if not path.is_file():
        raise EncoderError(f"checkpoint {path} is not a file")
    if path.stat().st_size == 0:
        raise EncoderError(f"checkpoint {path} is empty (0 bytes)")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    # unpickling damaged bytes can fail in many ways (IndexError, KeyError, ...): all mean the
    # same thing here
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise EncoderError(
            f"checkpoint {path} cannot be read by torch.load ({first_line}); the file is "
            "truncated, corrupt, not a torch.save file, or holds objects other than tensors"
        ) from error
    return unwrap_state_dict(loaded, path), short_hash(_file_chunks(path))


def _file_chunks(path: Path) -> Iterable[bytes]:
    with path.open("rb") as handle:
        while block := handle.read(1 << 24):
            yield block


def unwrap_state_dict(loaded: object, path: Path) -> dict[str, torch.Tensor]:
    """The flat name -> tensor mapping inside ``loaded``; EncoderError when there is none."""
    if not isinstance(loaded, Mapping):
        raise EncoderError(
            f"checkpoint {path} holds a {type(loaded).__name__}, not a state dict (name -> tensor)"
        )
    for key in WRAPPER_KEYS:
        inner = loaded.get(key)
        if isinstance(inner, Mapping) and inner and not isinstance(inner, torch.Tensor):
            loaded = inner
            break
    if not loaded:
        raise EncoderError(f"checkpoint {path} is an empty dict, not a state dict")
    names = [str(key) for key in loaded]
    if all(name.startswith("module.") for name in names):
        loaded = {
            name[len("module.") :]: value
            for name, value in zip(names, loaded.values(), strict=True)
        }
    not_tensors = [str(k) for k, v in loaded.items() if not isinstance(v, torch.Tensor)]
    if len(not_tensors) == len(loaded):
        raise EncoderError(f"checkpoint {path} is a dict without tensors, not a state dict")
    return {str(key): value for key, value in loaded.items() if isinstance(value, torch.Tensor)}


def _quote(names: list[str]) -> str:
    shown = ", ".join(names[:QUOTED_KEYS])
    more = len(names) - QUOTED_KEYS
    return shown + (f" and {more} more" if more > 0 else "")


def load_matching_state_dict(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    """Load ``state`` into ``model`` as float32 parameters; EncoderError naming missing, unexpected,
    wrongly shaped and non-finite tensors."""
    expected = model.state_dict()
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    wrong = [
        f"{name} {tuple(state[name].shape)} (model needs {tuple(tensor.shape)})"
        for name, tensor in expected.items()
        if name in state and state[name].shape != tensor.shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s): {_quote(missing)}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s): {_quote(unexpected)}")
    if wrong:
        problems.append(f"wrong shape for {len(wrong)} tensor(s): {_quote(wrong)}")
    if problems:
        raise EncoderError(
            f"checkpoint {path} does not match the model built from its shapes: "
            + "; ".join(problems)
        )
    floats = {name: value.float() for name, value in state.items()}
    not_finite = [name for name, value in floats.items() if not torch.isfinite(value).all()]
    if not_finite:
        raise EncoderError(
            f"checkpoint {path} has NaN or infinite values in {len(not_finite)} tensor(s): "
            f"{_quote(not_finite)}"
        )
    # assign: the file's tensors become the parameters (the model may have been built on "meta")
    model.load_state_dict(floats, strict=True, assign=True)
