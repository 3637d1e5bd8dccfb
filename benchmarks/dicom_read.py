"""Reading speed of chexretrieve.dicom on RG1, a real chest radiograph (1955 x 1841, 15 bits).

For each of RG1's four encodings it prints images/s of ``read_radiograph`` (validation, decode,
hash, display transform), of a bare ``pydicom.dcmread(...).pixel_array`` decode, their ratio (how
much of pydicom's own decode speed the full reader keeps), and the rate of ``read_dicom_header``.

    .venv/bin/python benchmarks/dicom_read.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import chexretrieve.dicom as cxd  # first: guards gdcm's imports before pydicom loads its codecs


def _rate(work, repeats: int) -> float:
    work()  # warm up: imports, codec initialisation, file cache
    start = time.perf_counter()
    for _ in range(repeats):
        work()
    return repeats / (time.perf_counter() - start)


def main() -> None:
    import pydicom
    from pydicom.data import get_testdata_file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed reads per measurement")
    args = parser.parse_args()
    print(f"{'file':<14}{'read img/s':>12}{'pydicom img/s':>15}{'ratio':>8}{'header/s':>10}")
    for name in ("RG1_UNCI.dcm", "RG1_UNCR.dcm", "RG1_J2KI.dcm", "RG1_J2KR.dcm"):
        path = get_testdata_file(name)
        full = _rate(lambda p=path: cxd.read_radiograph(p), args.repeats)
        bare = _rate(lambda p=path: pydicom.dcmread(p).pixel_array, args.repeats)
        header = _rate(lambda p=path: cxd.read_dicom_header(p), args.repeats * 10)
        print(f"{name:<14}{full:>12.2f}{bare:>15.2f}{full / bare:>8.2f}{header:>10.0f}")


if __name__ == "__main__":
    main()
