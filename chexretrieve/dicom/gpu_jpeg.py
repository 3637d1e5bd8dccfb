"""JPEG decoded on the GPU (nvJPEG through ``torchvision.io.decode_jpeg(device="cuda")``).

For ingest's ``IngestConfig.gpu_jpeg``: each decoding worker sends the compressed JPEG stream (a
JPEG file, or the frame of a DICOM JPEG Baseline file) to the GPU, where nvJPEG decodes it and a
box average shrinks it to the working resolution; only the small image comes back to the worker,
which carries on as with a CPU decode (display transform, thumbnail, the encoder's preprocessing).
The entropy decoding, the CPU-heavy part of a JPEG, leaves the CPU.

torchvision is not a dependency of the project (it would switch transformers to its torchvision
image processors, see pyproject.toml); it comes with CUDA machines' PyTorch images, where this
runs. ``check_gpu_jpeg()`` says plainly what is missing. nvJPEG's inverse DCT is not libjpeg's, so
its pixels differ from a CPU decode by a grey level here and there: such images are identified by a
hash of their compressed data, as with ``codec="reduced"`` (chexretrieve.dicom.working).
"""

from __future__ import annotations

import numpy as np


class GpuJpegUnavailable(RuntimeError):
    """nvJPEG cannot be used here; the message says what is missing."""


def check_gpu_jpeg() -> None:
    """Raise GpuJpegUnavailable unless torchvision's nvJPEG decoder and a CUDA device are here."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise GpuJpegUnavailable(f"GPU JPEG decoding needs torch ({exc})") from exc
    if not torch.cuda.is_available():
        raise GpuJpegUnavailable(
            "GPU JPEG decoding (nvJPEG) needs a CUDA device, and this machine has none; "
            "leave --gpu-jpeg off (JPEG then decodes on the CPU)"
        )
    try:
        from torchvision.io import decode_jpeg  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or torchvision built for another torch
        raise GpuJpegUnavailable(
            "GPU JPEG decoding (nvJPEG) needs torchvision matching this torch "
            f"({type(exc).__name__}: {exc}); it is not a project dependency: install the "
            "torchvision of your CUDA PyTorch build (e.g. pip install torchvision==<its version>)"
        ) from exc


def decode_jpeg_on_gpu(stream: bytes, scale: int) -> np.ndarray:
    """The greyscale image of a JPEG stream decoded by nvJPEG, box-averaged ``scale`` times on
    the GPU (blocks at the right and bottom edges over the pixels they hold), as uint8."""
    import torch
    import torch.nn.functional as F
    from torchvision.io import ImageReadMode, decode_jpeg

    data = torch.frombuffer(bytearray(stream), dtype=torch.uint8)
    image = decode_jpeg(data, mode=ImageReadMode.GRAY, device="cuda")  # (1, rows, columns)
    if scale > 1:
        pooled = F.avg_pool2d(image[None].float(), scale, ceil_mode=True, count_include_pad=False)[
            0
        ]
        image = pooled.round_().clamp_(0, 255).to(torch.uint8)
    return image[0].cpu().numpy()
