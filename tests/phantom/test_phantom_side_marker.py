"""The L/R side marker of a phantom sits on the side it names (defect 9 of issue 24).

Radiographs are displayed as if facing the patient: the patient's right is on the image's left.
So an "R" must be drawn in the image's left half and an "L" in its right half. The letter and its
side are read back from the pixels with this test's own bitmaps, not with the drawing code.
"""

from __future__ import annotations

import numpy as np

from chexretrieve.phantom import PhantomConfig, generate_case

# the test's own 5 x 7 letter shapes (1 = ink)
_L = ["10000", "10000", "10000", "10000", "10000", "10000", "11111"]
_R = ["11110", "10001", "10001", "11110", "10100", "10010", "10001"]


def _bits(rows: list[str]) -> np.ndarray:
    return np.array([[c == "1" for c in row] for row in rows], dtype=bool)


def _read_marker(image: np.ndarray) -> tuple[str, str]:
    """(letter, image half) of the marker: the best exact match of either letter's bitmap, at
    any integer scale, among the saturated pixels of the top band of the image."""
    size = image.shape[0]
    band = image[: size // 4] >= 0.94
    best: tuple[float, str, int] | None = None
    for scale in range(1, max(2, size // 40)):
        for name, rows in (("L", _L), ("R", _R)):
            shape = np.kron(_bits(rows), np.ones((scale, scale), dtype=bool))
            h, w = shape.shape
            for r in range(band.shape[0] - h + 1):
                for c in range(size - w + 1):
                    window = band[r : r + h, c : c + w]
                    if not window[shape].all():
                        continue
                    # ink where the letter has ink, and background where it has none
                    score = float((window == shape).mean())
                    if best is None or score > best[0]:
                        best = (score, name, c + w / 2)
    assert best is not None and best[0] > 0.97, f"no marker found (best {best})"
    _, name, centre = best
    return name, ("image left" if centre < size / 2 else "image right")


def test_every_marker_sits_on_the_side_it_names() -> None:
    config = PhantomConfig(size=128)
    seen = set()
    for index in range(24):
        case = generate_case(0, index, config)
        letter, half = _read_marker(case.image)
        assert letter == case.nuisance["marker"], (index, letter, case.nuisance["marker"])
        expected = "image left" if letter == "R" else "image right"
        assert half == expected, f"case {index}: '{letter}' drawn on the {half}"
        seen.add(letter)
    assert seen == {"L", "R"}
