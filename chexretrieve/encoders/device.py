"""Device, batch size and autocast choices shared by the encoders."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from chexretrieve.encoders.base import EncoderError

#: batch size used when EncoderConfig.batch_size is None
DEFAULT_BATCH_SIZE = {"cuda": 64, "cpu": 16}


def select_device(preference: str = "auto") -> torch.device:
    """The torch device for ``preference``: "auto" (CUDA when available, else CPU), "cpu", "cuda"...

    Raises EncoderError when CUDA is asked for but not available, or the name is not a device.
    """
    name = preference.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise EncoderError(
            f"unknown device {preference!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        ) from error
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EncoderError(
                f"device {preference!r} was requested but CUDA is not available on this machine; "
                "use device 'auto' or 'cpu'"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise EncoderError(
                f"device {preference!r} does not exist: this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    elif device.type != "cpu":
        raise EncoderError(f"device {preference!r} is not supported: use 'auto', 'cpu' or 'cuda'")
    return device


def resolve_batch_size(batch_size: int | None, device: torch.device) -> int:
    """``batch_size`` when set, else the default for the device type."""
    if batch_size is not None:
        return batch_size
    return DEFAULT_BATCH_SIZE.get(device.type, DEFAULT_BATCH_SIZE["cpu"])


#: the autocast precisions EncoderConfig.autocast_dtype names
AUTOCAST_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@contextlib.contextmanager
def inference_context(
    device: torch.device, use_autocast: bool, autocast_dtype: str = "float16"
) -> Iterator[None]:
    """``torch.inference_mode()``, plus float16 (or bfloat16) autocast on CUDA when
    ``use_autocast``; the CPU always computes in float32."""
    with torch.inference_mode():
        if device.type == "cuda" and use_autocast:
            with torch.autocast(device_type="cuda", dtype=AUTOCAST_DTYPES[autocast_dtype]):
                yield
        else:
            yield
