"""Small builders shared by the store tests."""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np

from chexretrieve.store import ImageRecord


def unit_vector(seed: int, dim: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def image_record(i: int, *, study: int | None = None, pixels: str = "", **overrides) -> ImageRecord:
    fields = dict(
        sop_uid=f"1.2.826.0.1.{i}",
        study_uid=f"1.2.826.0.2.{study if study is not None else i}",
        series_uid=f"1.2.826.0.3.{i}",
        pixel_sha256=hashlib.sha256(f"pixels-{i}-{pixels}".encode()).hexdigest(),
        patient_id=f"P{i % 5}",
        patient_sex="F" if i % 2 else "M",
        patient_age_years=float(20 + i),
        study_date=dt.date(2020, 1, 1) + dt.timedelta(days=i),
        view_position="PA" if i % 3 else "AP",
        modality="DX",
        pixel_rows=64,
        pixel_columns=64,
        source_path=f"/archive/{i}.dcm",
    )
    fields.update(overrides)
    return ImageRecord(**fields)


def _root_conftest():
    """tests/conftest.py by path (the module name 'conftest' is ambiguous across folders)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("chexretrieve_tests_root_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ROOT = _root_conftest()
require = _ROOT.require
require_binary = _ROOT.require_binary
