"""The encoder stage's device code: a stack of model inputs through an image model, in batches.

``embed_stack(model, inputs, device, batch_size, use_autocast, autocast_dtype)`` returns unit
embeddings. On the CPU it runs the batches one after the other (fp32, bit for bit what one batch at
a time gives). On CUDA it keeps the device busy:

- inputs are copied into two reusable page-locked (pinned) staging buffers and sent with
  ``non_blocking=True`` copies on a side stream, so batch i+1 travels while batch i computes;
- the forward pass runs under ``torch.autocast`` in float16 or bfloat16 when ``use_autocast``
  (``benchmarks/gpu_check.sh`` measures the per-image cosine to fp32 and reports it);
- outputs stay on the device until the last batch, then come back in one copy (one sync).

``auto_batch_size`` picks the batch size from the device's free memory: one probe batch measures
the peak memory per image, and the batch is the largest power of two that fits half of what is
free (between 16 and 1024).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from chexretrieve.encoders.base import unit_rows
from chexretrieve.encoders.device import inference_context

#: the share of free device memory a batch may take (the rest: other processes, fragmentation)
MEMORY_SHARE = 0.5
#: bounds of an automatic CUDA batch size
AUTO_BATCH_BOUNDS = (16, 1024)

Model = Callable[[torch.Tensor], torch.Tensor]


def batch_size_for_memory(
    free_bytes: int, bytes_per_image: int, bounds: tuple[int, int] = AUTO_BATCH_BOUNDS
) -> int:
    """The largest power of two whose images take at most MEMORY_SHARE of ``free_bytes``, within
    ``bounds``."""
    low, high = bounds
    if bytes_per_image <= 0:
        return high
    fits = int(free_bytes * MEMORY_SHARE // bytes_per_image)
    size = low
    while size * 2 <= min(fits, high):
        size *= 2
    return size


def auto_batch_size(
    model: Model, input_shape: tuple[int, ...], device: torch.device, autocast: tuple[bool, str]
) -> int:
    """A CUDA batch size from free memory and one probe batch's peak memory per image."""
    probe = 8
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    with inference_context(device, *autocast):
        model(torch.zeros((probe, *input_shape), device=device))
    torch.cuda.synchronize(device)
    per_image = (torch.cuda.max_memory_allocated(device) - before) // probe
    free, _ = torch.cuda.mem_get_info(device)
    return batch_size_for_memory(free, per_image)


def image_batch_size(encoder, model: Model, input_shape: tuple[int, ...]) -> int:  # noqa: ANN001
    """The encoder's image batch size: its configured one, else on CUDA one from free memory
    (measured once per encoder), else the device default it resolved."""
    if encoder.config.batch_size is not None or encoder.device.type != "cuda":
        return encoder.batch_size
    cached = getattr(encoder, "_auto_image_batch", None)
    if cached is None:
        autocast = (encoder.config.use_autocast, encoder.config.autocast_dtype)
        cached = auto_batch_size(model, tuple(input_shape), encoder.device, autocast)
        encoder._auto_image_batch = cached
    return cached


def embed_stack(
    model: Model,
    inputs: np.ndarray,
    device: torch.device,
    batch_size: int,
    use_autocast: bool,
    autocast_dtype: str = "float16",
    embed_dim: int = 0,
) -> np.ndarray:
    """(n, embed_dim) float32 unit rows of ``model`` over ``inputs`` (n, ...) float32."""
    if len(inputs) == 0:
        return np.zeros((0, embed_dim), dtype=np.float32)
    if device.type == "cuda":
        return _embed_cuda(model, inputs, device, batch_size, (use_autocast, autocast_dtype))
    rows = []
    for start in range(0, len(inputs), batch_size):
        pixels = torch.from_numpy(inputs[start : start + batch_size])
        with inference_context(device, use_autocast, autocast_dtype):
            rows.append(unit_rows(model(pixels).float().numpy()))
    return np.concatenate(rows)


def _embed_cuda(
    model: Model, inputs: np.ndarray, device: torch.device, batch_size: int, autocast: tuple
) -> np.ndarray:
    starts = list(range(0, len(inputs), batch_size))
    shape = (min(batch_size, len(inputs)), *inputs.shape[1:])
    staging = [torch.empty(shape, dtype=torch.float32, pin_memory=True) for _ in range(2)]
    copies = torch.cuda.Stream(device)
    events: list[torch.cuda.Event] = []

    def upload(i: int) -> torch.Tensor:
        if i >= 2:
            events[i - 2].synchronize()  # the copy that last read this staging buffer is done
        part = inputs[starts[i] : starts[i] + batch_size]
        buffer = staging[i % 2][: len(part)]
        buffer.copy_(torch.from_numpy(part))
        with torch.cuda.stream(copies):
            on_device = buffer.to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(copies)
        events.append(event)
        return on_device

    outputs = []
    ahead = upload(0)
    compute = torch.cuda.current_stream(device)
    for i in range(len(starts)):
        pixels = ahead
        compute.wait_event(events[i])
        pixels.record_stream(compute)  # allocated on the copy stream, used on this one
        if i + 1 < len(starts):
            ahead = upload(i + 1)  # travels while this batch computes
        with inference_context(device, *autocast):
            outputs.append(model(pixels).float())
    return unit_rows(torch.cat(outputs).cpu().numpy())
