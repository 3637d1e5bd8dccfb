"""The GPU JPEG option (nvJPEG through torchvision) on a machine without either: it is refused in
one clear sentence before any work, and everything around the decoder call (pooling to the working
resolution, identity, the fall-back to the CPU) is checked with a stand-in ``torchvision.io`` that
decodes with Pillow on the CPU. The nvJPEG call itself runs only on a CUDA machine
(benchmarks/gpu_check.sh)."""

from __future__ import annotations

import io
import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from chexretrieve.dicom import pydicom_test_file, read_radiograph
from chexretrieve.dicom.gpu_jpeg import GpuJpegUnavailable, check_gpu_jpeg, decode_jpeg_on_gpu
from chexretrieve.dicom.samples import write_jpeg_file, write_sample
from chexretrieve.dicom.working import encoded_sha256, read_working_radiograph
from chexretrieve.dicom.write import derive_uid


@pytest.fixture
def pillow_torchvision(monkeypatch):
    """A stand-in torchvision.io whose decode_jpeg decodes with Pillow into a CPU tensor."""
    calls = []

    def decode_jpeg(data, mode=None, device="cpu"):  # noqa: ANN001, ANN202
        calls.append(device)
        with Image.open(io.BytesIO(bytes(data.numpy())), formats=["JPEG"]) as image:
            return torch.from_numpy(np.array(image.convert("L")))[None]

    package = types.ModuleType("torchvision")
    module = types.ModuleType("torchvision.io")
    module.decode_jpeg = decode_jpeg
    module.ImageReadMode = types.SimpleNamespace(GRAY="gray")
    package.io = module
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.io", module)
    return calls


def test_refused_without_cuda_in_one_sentence(tmp_path):
    from chexretrieve.ingest import IngestConfig, ingest_paths
    from chexretrieve.store import open_store

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without it")
    with pytest.raises(GpuJpegUnavailable, match="needs a CUDA device"):
        check_gpu_jpeg()
    with open_store(f"sqlite:///{tmp_path / 's.sqlite'}") as store:
        with pytest.raises(ValueError, match="CUDA device"):
            ingest_paths([tmp_path], store, object(), IngestConfig(gpu_jpeg=True))
        assert store.runs_frame().empty  # refused before the run started


def test_refused_without_torchvision_naming_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    with pytest.raises(GpuJpegUnavailable, match="needs torchvision"):
        check_gpu_jpeg()


def test_gpu_jpeg_cannot_run_under_a_worker_memory_cap():
    from chexretrieve.ingest import IngestConfig

    with pytest.raises(ValueError, match="CUDA context"):
        IngestConfig(gpu_jpeg=True, worker_memory_mb=512)


def test_pooling_on_the_device_is_the_block_mean(pillow_torchvision):
    rng = np.random.default_rng(4)
    values = rng.integers(0, 256, (37, 50)).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(values, "L").save(buffer, format="JPEG", quality=100)
    decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue()))).astype(np.float64)
    pooled = decode_jpeg_on_gpu(buffer.getvalue(), 4)
    assert pooled.dtype == np.uint8 and pooled.shape == (10, 13)
    reference = np.array(
        [
            [decoded[i * 4 : i * 4 + 4, j * 4 : j * 4 + 4].mean() for j in range(13)]
            for i in range(10)
        ]
    )
    assert np.abs(pooled - reference).max() <= 0.5 + 1e-6  # rounded to the nearest level
    assert pillow_torchvision == ["cuda"]  # asked for the GPU


@pytest.fixture(scope="module")
def jpeg_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-jpeg")
    rg1 = read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).pixels[:1024, :960]
    metadata = {
        "PatientID": "GPU",
        "StudyInstanceUID": derive_uid("gpu", "study"),
        "SeriesInstanceUID": derive_uid("gpu", "series"),
        "SOPInstanceUID": derive_uid("gpu", "sop"),
        "Modality": "CR",
    }
    stored = np.round(rg1 * 32767).astype(np.uint16)
    return {
        "jpeg-baseline": write_sample(folder / "b.dcm", stored, "jpeg-baseline", metadata),
        "jpeg-file": write_jpeg_file(folder / "f.jpg", np.rint(rg1 * 255).astype(np.uint8)),
        "rle": write_sample(folder / "r.dcm", stored, "rle", metadata),
    }


@pytest.mark.parametrize("kind", ["jpeg-baseline", "jpeg-file"])
def test_gpu_codec_reads_like_the_cpu(pillow_torchvision, jpeg_files, kind):
    path = jpeg_files[kind]
    cpu = read_working_radiograph(path, working_side=250)
    gpu = read_working_radiograph(path, working_side=250, codec="gpu")
    assert pillow_torchvision and gpu.scale == cpu.scale == 4
    assert (gpu.metadata.rows, gpu.metadata.columns) == (cpu.metadata.rows, cpu.metadata.columns)
    # the stand-in decodes as the CPU does, so the only difference is where the mean is rounded
    assert np.abs(gpu.pixels - cpu.pixels).max() * 255 <= 1.0
    assert gpu.pixel_sha256 != cpu.pixel_sha256  # identity from the compressed data
    if kind == "jpeg-file":
        assert gpu.pixel_sha256 == encoded_sha256(path.read_bytes(), "jpeg-file")


def test_other_syntaxes_and_refused_streams_go_to_the_cpu(
    pillow_torchvision, jpeg_files, monkeypatch
):
    rle = read_working_radiograph(jpeg_files["rle"], working_side=250, codec="gpu")
    assert not pillow_torchvision  # RLE never reaches the GPU decoder
    assert rle.pixel_sha256 == read_radiograph(jpeg_files["rle"]).pixel_sha256

    def refuse(data, mode=None, device="cpu"):  # noqa: ANN001, ANN202
        raise RuntimeError("nvJPEG: unsupported stream")

    monkeypatch.setattr(sys.modules["torchvision.io"], "decode_jpeg", refuse)
    path = jpeg_files["jpeg-baseline"]
    fallback = read_working_radiograph(path, working_side=250, codec="gpu")
    assert fallback.pixel_sha256 == read_radiograph(path).pixel_sha256
    assert any("gpu decode not used" in note for note in fallback.warnings)
