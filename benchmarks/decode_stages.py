"""Where a decoding worker's time goes, per transfer syntax, before and after working resolution.

    .venv/bin/python benchmarks/decode_stages.py [--repeats 5] [--syntax ...] [--json FILE]

One RG1 image (pydicom-data's 1955 x 1841 PA chest CR, 15-bit) written in each transfer syntax
(``chexretrieve.dicom.samples``) and as an 8-bit JPEG file (CheXpert / MIMIC-CXR-JPG). For each,
the CPU milliseconds (``time.process_time``, one torch thread, as in a decoding worker; the median
of ``--repeats``; CPU time, so the figures hold on a loaded machine) of every stage:

- before (the path of commit 1f23b76): pydicom's own order of decoders (pydicom's RLE, gdcm for
  JPEG), parse (pydicom + validation), codec (stored values), hash, display (modality LUT, VOI LUT
  / window, MONOCHROME1) at full size, thumbnail and CheXzero and phantom preprocessing from the
  full image;
- full: the same with the fastest decoder of each syntax (``pixels.FASTEST_PLUGINS``);
- working (``read_working_radiograph``, the ingest path now): parse, codec, hash, reduce (box
  average to the working side), display on the small image, thumbnail and preprocessing from it;
- reduced (``--reduced-decode``): JPEG and JPEG 2000 decoded at reduced size by the codec.

The 'total' columns add the stages a CheXzero ingest runs (parse to CheXzero preprocessing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from chexretrieve.dicom import ReadConfig, read_radiograph
from chexretrieve.dicom import read as dicom_read
from chexretrieve.dicom import working as dicom_working
from chexretrieve.dicom.images import image_display_pixels, read_image_file
from chexretrieve.dicom.pixels import decode_stored_pixels, display_pixels, pixel_sha256
from chexretrieve.dicom.read import pydicom_test_file
from chexretrieve.dicom.samples import SAMPLE_SYNTAXES, write_jpeg_file, write_sample
from chexretrieve.dicom.thumbnails import thumbnail_png
from chexretrieve.dicom.write import derive_uid
from chexretrieve.encoders.chexzero import ChexzeroPreprocess
from chexretrieve.encoders.phantom import PhantomPreprocess

CHEXZERO = ChexzeroPreprocess(224)
PHANTOM = PhantomPreprocess(128, 0.45, 0.25)
WORKING_SIDE = max(CHEXZERO.working_side, 384)  # also the thumbnail's 1.5 x 256
#: pydicom's own plugin order, which the reader used before FASTEST_PLUGINS
BEFORE = ReadConfig(decoding_plugins=("pydicom", "gdcm"))


class Clock:
    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self._last = time.process_time()

    def lap(self, name: str) -> None:
        now = time.process_time()
        self.marks[name] = (now - self._last) * 1000
        self._last = now


def full_path(path: Path, config: ReadConfig) -> dict[str, float]:
    clock, notes = Clock(), []
    found, _ = dicom_read._open_checked(path, config)  # noqa: SLF001
    if found == "dicom":
        ds, _, module = dicom_read._validated_header(path, config, notes, header_only=False)  # noqa: SLF001
        clock.lap("parse")
        stored = decode_stored_pixels(ds, module, config)
        clock.lap("codec")
        pixel_sha256(stored)
        clock.lap("hash")
        pixels = display_pixels(stored, ds, module, config, notes)
    else:
        clock.lap("parse")
        stored = read_image_file(path, found, config, notes)
        clock.lap("codec")
        pixel_sha256(stored)
        clock.lap("hash")
        pixels = image_display_pixels(stored)
    clock.lap("display")
    thumbnail_png(pixels, 256)
    clock.lap("thumbnail")
    CHEXZERO(pixels)
    clock.lap("chexzero")
    PHANTOM(pixels)
    clock.lap("phantom")
    return clock.marks


def working_path(path: Path, config: ReadConfig, reduced: bool) -> dict[str, float]:
    """read_working_radiograph's steps, timed one by one (the same calls it makes)."""
    clock, notes = Clock(), []
    found, _ = dicom_read._open_checked(path, config)  # noqa: SLF001
    rows = columns = scale = 0
    if found == "dicom":
        ds, meta, module = dicom_read._validated_header(path, config, notes, header_only=False)  # noqa: SLF001
        rows, columns = meta.rows, meta.columns
        clock.lap("parse")
        reduced_values = None
        if reduced and module.transfer_syntax in (
            dicom_working._JPEG_SYNTAXES | dicom_working._J2K_SYNTAXES  # noqa: SLF001
        ):
            reduced_values = dicom_working._reduced_dicom(  # noqa: SLF001
                ds, module, WORKING_SIDE, notes, "reduced"
            )
        if reduced_values is not None:
            small, scale, _ = reduced_values
            clock.lap("codec")
            clock.lap("hash")
            clock.lap("reduce")
            pixels = display_pixels(small, ds, module, config, notes)
        else:
            stored = decode_stored_pixels(ds, module, config)
            clock.lap("codec")
            pixel_sha256(stored)
            clock.lap("hash")
            scale = dicom_working.working_scale(rows, columns, WORKING_SIDE)
            small = dicom_working.box_reduce(stored, scale)
            clock.lap("reduce")
            pixels = display_pixels(small, ds, module, config, notes, full=stored)
        clock.lap("display")
    else:
        clock.lap("parse")
        radiograph = dicom_working.read_working_radiograph(
            path, config, working_side=WORKING_SIDE, codec="reduced" if reduced else "full"
        )
        clock.lap("codec")  # the JPEG decode, hash, reduce and display together
        for name in ("hash", "reduce", "display"):
            clock.lap(name)
        pixels, scale = radiograph.pixels, radiograph.scale
        rows, columns = radiograph.metadata.rows, radiograph.metadata.columns
    thumbnail_png(pixels, 256)
    clock.lap("thumbnail")
    CHEXZERO.from_working(pixels, (rows, columns), scale)
    clock.lap("chexzero")
    PHANTOM.from_working(pixels, (rows, columns), scale)
    clock.lap("phantom")
    return clock.marks


def sample_files(folder: Path, syntaxes: list[str]) -> dict[str, Path]:
    source = read_radiograph(pydicom_test_file("RG1_UNCI.dcm"), ReadConfig())
    stored = np.round(source.pixels * 32767).astype(np.uint16)
    metadata = {
        "PatientID": "STAGES",
        "StudyInstanceUID": derive_uid("stages", "study"),
        "SeriesInstanceUID": derive_uid("stages", "series"),
        "SOPInstanceUID": derive_uid("stages", "sop"),
        "Modality": "CR",
    }
    files = {}
    for syntax in syntaxes:
        if syntax == "jpeg-file":
            eight = np.rint(source.pixels * 255).astype(np.uint8)
            files[syntax] = write_jpeg_file(folder / "rg1.jpg", eight)
        else:
            files[syntax] = write_sample(folder / f"{syntax}.dcm", stored, syntax, metadata)
    return files


def median_marks(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(run[key] for run in runs), 1) for key in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--syntax", nargs="*", default=[*SAMPLE_SYNTAXES, "jpeg-file"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = ReadConfig()
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="chexretrieve-stages-") as tmp:
        files = sample_files(Path(tmp), args.syntax)
        for syntax, path in files.items():
            row = {}
            for name, run in (
                ("before", lambda p=path: full_path(p, BEFORE)),
                ("full", lambda p=path: full_path(p, config)),
                ("working", lambda p=path: working_path(p, config, False)),
                ("reduced", lambda p=path: working_path(p, config, True)),
            ):
                run()  # warm-up
                marks = median_marks([run() for _ in range(args.repeats)])
                marks["total"] = round(sum(v for k, v in marks.items() if k != "phantom"), 1)
                row[name] = marks
            figures[syntax] = row
    stages = ["parse", "codec", "hash", "reduce", "display", "thumbnail", "chexzero", "phantom"]
    print(f"CPU ms per image (median of {args.repeats}), RG1 1955 x 1841, one torch thread")
    print(f"{'syntax':<14}{'path':<9}" + "".join(f"{s:>10}" for s in [*stages, "total"]))
    for syntax, row in figures.items():
        for name, marks in row.items():
            cells = "".join(f"{marks.get(s, 0.0):>10.1f}" for s in [*stages, "total"])
            print(f"{syntax:<14}{name:<9}{cells}")
    for syntax, row in figures.items():
        before = row["before"]["total"]
        print(f"{syntax}: {before / row['working']['total']:.1f}x faster (working), "
              f"{before / row['reduced']['total']:.1f}x (reduced) than before")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
