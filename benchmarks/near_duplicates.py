"""How close a re-encoded copy of an image is to the original, against how close distinct images
are: the measurement behind SearchConfig.duplicate_cosine (issue 24, defect 2).

RG1_UNCI (pydicom-data) is embedded as archived (the DICOM file) and as uploads of it: an 8-bit
PNG, a JPEG (quality 75) and a PNG shrunk to 512 px. Distinct images: phantoms of the default
world, each against its nearest other phantom (priors of the same patient included), and
RG1 against every phantom. Prints the cosines; the threshold must sit between the two groups.

    .venv/bin/python benchmarks/near_duplicates.py [--encoder phantom] [--n 600]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", default="phantom")
    parser.add_argument("--n", type=int, default=600, help="phantoms (default world, seed 0)")
    args = parser.parse_args()

    from PIL import Image

    from chexretrieve.dicom import pydicom_test_file, read_radiograph, render_for_display
    from chexretrieve.encoders import load_encoder
    from chexretrieve.phantom import PhantomConfig, generate_batch

    encoder = load_encoder(args.encoder)

    def embed(images) -> np.ndarray:
        return np.asarray(encoder.embed_images(list(images)), dtype=np.float64)

    dicom = read_radiograph(pydicom_test_file("RG1_UNCI.dcm"))
    shown = render_for_display(dicom)
    copies = {}
    with tempfile.TemporaryDirectory() as folder:
        full = Image.fromarray(shown)
        small = full.copy()
        small.thumbnail((512, 512), Image.Resampling.LANCZOS)
        for name, image, options in (
            ("rg1.png", full, {}),
            ("rg1.jpg", full, {"quality": 75}),
            ("rg1-512.png", small, {}),
        ):
            path = Path(folder) / name
            image.save(path, **options)
            copies[name] = read_radiograph(path).pixels
    archived = embed([dicom.pixels])[0]
    uploads = embed(copies.values())
    print("re-encoded copies of RG1 against the archived DICOM (cosine):")
    for name, vector in zip(copies, uploads, strict=True):
        print(f"  {name:12s} {float(vector @ archived):.5f}")

    cases = generate_batch(0, list(range(args.n)), PhantomConfig())
    phantoms = embed(case.image for case in cases)
    phantoms /= np.linalg.norm(phantoms, axis=1, keepdims=True)
    gram = phantoms @ phantoms.T
    np.fill_diagonal(gram, -np.inf)
    nearest = gram.max(axis=1)
    same_patient = [
        float(gram[i, j])
        for i in range(args.n)
        for j in range(i + 1, args.n)
        if cases[i].metadata["patient_id"] == cases[j].metadata["patient_id"]
    ]
    print(f"distinct phantoms ({args.n}), cosine with the nearest other phantom:")
    for q in (50, 99, 100):
        print(f"  {q:3d}th percentile {np.percentile(nearest, q):.5f}")
    if same_patient:
        print(f"  same patient, other study: max {max(same_patient):.5f} "
              f"({len(same_patient)} pairs)")  # fmt: skip
    print(f"RG1 against the nearest phantom: {float((phantoms @ archived).max()):.5f}")


if __name__ == "__main__":
    main()
